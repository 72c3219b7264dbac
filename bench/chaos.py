#!/usr/bin/env python3
"""The chaos run: a fleet under faults, counted at a real receiver.

Run through scripts/chaos.sh (which builds). It starts its OWN Redis and
Postgres on spare ports (never the machine's shared ones), a receiver that
verifies signatures and counts receipts per webhook-id, several workers, two
sweepers ticking every second (their ticks overlap), and a producer emitting
M events in batches. Meanwhile it injects faults:

  - kill -9 of a random worker every few seconds (restarted at once);
  - a Redis restart (it keeps nothing on disk: every queue and key is lost);
  - a Postgres crash and restart;
  - the receiver hanging, answering 500, and dropping connections, each for a while;
  - with --hostile, every answer the receiver accepts carries hostile bytes
    (NUL, invalid UTF-8, gzip, terminal escapes, 64 KiB of binary).

With --network (root only), the workers and the producer run in network
namespaces of their own (bench/netns.py), so their traffic to Redis,
Postgres and the receiver crosses veth pairs and a bridge, and on those links:

  - every packet is delayed (--delay, the round trip's extra milliseconds,
    uniform, half each way) for the whole faulty phase;
  - packet loss (5, 10 or 20%) on one or every namespace, for a while;
  - partitions (every packet dropped, nobody told) between one worker and
    Redis, one worker and Postgres, one worker and both, one worker and the
    receiver, the producer and Redis, Postgres or both, each for
    --partition-seconds; some of them span the Redis and Postgres restarts.

Then it stops the faults, waits until every row is terminal, and prints what
arrived: events emitted, rows Delivered / Exhausted, events never received
(with reasons), duplicate receipts and what explains each of them (per
event: see explain_duplicates), unknown webhook-ids, bad signatures, rows
left non-terminal.

Bounded in time: --duration for the faulty phase, then at most --settle
seconds for the last retries.
"""
import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter

from services import Postgres, Redis, spare_port, wait_port

TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/hookfleet/target"))
BIN = os.path.join(TARGET, "release")
SECRET = "whsec_" + "Y2hhb3MtcnVuLXNlY3JldC0wMTIzNDU2Nzg5"  # base64 of a fixed test key


def log(msg):
    print(time.strftime("%H:%M:%S"), msg, flush=True)


class Fleet:
    def __init__(self, args, workdir, pg, redis, net=None):
        self.args, self.workdir, self.pg, self.redis, self.net = args, workdir, pg, redis, net
        self.receiver_port = spare_port()
        # With a network, the receiver listens on the bridge's address only:
        # every delivery crosses a namespace's link.
        self.receiver_host = net.host_ip if net else "127.0.0.1"
        allowed = "127.0.0.1/32" + (f",{net.subnet}" if net else "")
        self.env = dict(os.environ, DATABASE_URL=pg.url("hookfleet"), REDIS_URL=redis.url,
                        HOOKFLEET_REDIS_PREFIX="chaos:", HOOKFLEET_ALLOWED_NETWORKS=allowed,
                        HOOKFLEET_RETRY_SCHEDULE=args.schedule, HOOKFLEET_QUEUE_GRACE=args.grace,
                        RUST_LOG="info")
        # What a process in a namespace uses: the services at the bridge's address.
        self.ns_env = dict(self.env, DATABASE_URL=pg.url("hookfleet").replace("127.0.0.1", net.host_ip),
                           REDIS_URL=redis.url.replace("127.0.0.1", net.host_ip)) if net else self.env
        self.workers = [None] * args.workers
        self.sweepers = []
        self.receiver = None
        self.kills = 0
        self.producer_retries = 0
        self.worker_pids = {}  # pid -> namespace name (w0, w1, ...), for the attempts' worker ids
        self.t0 = time.time()
        self.lock = threading.Lock()

    def logfile(self, name):
        return open(os.path.join(self.workdir, name + ".log"), "ab")

    def start_receiver(self):
        self.receiver = subprocess.Popen(
            [os.path.join(BIN, "hookfleet-bench-receiver"), f"{self.receiver_host}:{self.receiver_port}",
             "--secret", SECRET] + (["--hostile"] if self.args.hostile else []),
            stdout=subprocess.DEVNULL, stderr=self.logfile("receiver"))
        wait_port(self.receiver_port, host=self.receiver_host)

    @property
    def receiver_url(self):
        return f"http://{self.receiver_host}:{self.receiver_port}"

    def receiver_call(self, path, method="GET"):
        req = urllib.request.Request(f"{self.receiver_url}{path}", method=method)
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read()) if path in ("/stats", "/ids", "/accepted") else r.read()

    def start_worker(self, i):
        # In its own namespace with --network (`ip netns exec` execs the
        # worker itself, so the pid is the worker's and a kill reaches it).
        prefix = self.net.exec_prefix(f"w{i}") if self.net else []
        slow = (["--slow-endpoint-concurrency", str(self.args.slow_endpoint_concurrency)]
                if self.args.slow_endpoint_concurrency else [])
        self.workers[i] = subprocess.Popen(
            prefix + [os.path.join(BIN, "hookfleet-worker"), "--concurrency", str(self.args.concurrency),
                      "--heartbeat-ttl", "3s", "--lease-margin", "2s", "--drain-timeout", "5s"] + slow,
            env=self.ns_env, stdout=subprocess.DEVNULL, stderr=self.logfile(f"worker-{i}"))
        self.worker_pids[self.workers[i].pid] = f"w{i}"

    def start_sweepers(self):
        for i in range(2):
            self.sweepers.append(subprocess.Popen(
                [os.path.join(BIN, "hookfleet-sweeper"), "--interval", "1s", "--batch-size", "1000"],
                env=self.env, stdout=subprocess.DEVNULL, stderr=self.logfile(f"sweeper-{i}")))

    def run(self, binary, *args, stdin=None, ns=None, timeout=None):
        """Runs a binary to its end, on the host or in namespace `ns`. With
        `timeout`, a run that takes longer is killed and reported as failed."""
        prefix = self.net.exec_prefix(ns) if ns else []
        try:
            return subprocess.run(prefix + [os.path.join(BIN, binary), *args], env=self.ns_env if ns else self.env,
                                  capture_output=True, text=True, input=stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(args, 124, "", f"killed after {timeout}s without an answer")

    def stop_all(self):
        for p in self.workers + self.sweepers + [self.receiver]:
            if p and p.poll() is None:
                p.terminate()
        for p in self.workers + self.sweepers + [self.receiver]:
            if p:
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()


def producer(fleet, args, t_end, done):
    """Emits args.events events in batches spread until t_end; retries a
    batch that fails (Postgres down) with the same event ids."""
    per_batch = 500
    batches = (args.events + per_batch - 1) // per_batch
    start = time.time()
    for b in range(batches):
        due = start + (t_end - start) * b / batches
        time.sleep(max(0.0, due - time.time()))
        lines = []
        for i in range(b * per_batch, min(args.events, (b + 1) * per_batch)):
            doc = {"name": f"SO-{i:06d}", "customer": "ACME", "grand_total": i, "note": "x" * 200}
            lines.append(json.dumps({"entity_type": "Sales Order", "event": "on_submit", "name": doc["name"],
                                     "doc": doc, "event_id": f"chaos-{i:06d}"}))
        while True:
            # In its own namespace with --network; a batch that hangs (a
            # partition) is killed after two minutes and sent again.
            r = fleet.run("hookfleet-producer", "emit", "--batch", "-", "--batch-size", "500",
                          stdin="\n".join(lines) + "\n", ns="p" if fleet.net else None, timeout=120)
            if r.returncode == 0:
                break
            # The error, without the warnings logged before it.
            last = " ".join(l.strip() for l in r.stderr.strip().splitlines()[-2:] if " WARN " not in l)
            log(f"producer: batch {b} failed ({last[:200]}); retrying")
            fleet.producer_retries += 1
            time.sleep(1)
    done.set()


def killer(fleet, args, stop):
    rng = random.Random(7)
    while not stop.wait(rng.uniform(args.kill_every * 0.5, args.kill_every * 1.5)):
        i = rng.randrange(args.workers)
        with fleet.lock:
            p = fleet.workers[i]
            if p and p.poll() is None:
                p.kill()
                p.wait()
                fleet.kills += 1
            fleet.start_worker(i)


def faults(fleet, pg, redis, args, t0, stop):
    d = args.duration
    plan = [
        (0.15, "redis restart", lambda: (redis.stop(), time.sleep(2), redis.start())),
        (0.35, "postgres crash and restart", lambda: (pg.crash(), time.sleep(4), pg.start())),
        (0.50, "receiver hangs", lambda: receiver_mode(fleet, "hang", args.fault_seconds)),
        (0.65, "receiver answers 500", lambda: receiver_mode(fleet, "fail", args.fault_seconds)),
        (0.80, "receiver drops connections", lambda: receiver_mode(fleet, "drop", args.fault_seconds)),
    ]
    for at, name, act in plan:
        if stop.wait(max(0.0, t0 + at * d - time.time())):
            return
        log(f"fault: {name}")
        act()
        log(f"fault over: {name}")


def network_plan(args):
    """The network faults: (start as a fraction of --duration, what, targets),
    each lasting --partition-seconds (at most 6% of --duration). A target is
    (namespace, fault): a partition from "redis", "postgres" or "receiver",
    or "loss" with its probability. Some partitions span the Redis restart
    (0.15) and the Postgres crash (0.35), so the partitioned side never sees
    the old connection close."""
    everyone = [f"w{i}" for i in range(args.workers)] + ["p"]
    w = [f"w{i % args.workers}" for i in range(3)]
    return [
        (0.04, f"partition: worker {w[0]} <-> Redis", [(w[0], "redis")]),
        (0.10, "loss 5% on every link", [(n, ("loss", 0.05)) for n in everyone]),
        (0.13, "partition: producer <-> Redis (spans the Redis restart)", [("p", "redis")]),
        (0.20, f"partition: worker {w[1]} <-> Postgres", [(w[1], "postgres")]),
        (0.27, "partition: producer <-> Postgres", [("p", "postgres")]),
        (0.33, f"partition: worker {w[2]} <-> Postgres (spans the Postgres crash)", [(w[2], "postgres")]),
        (0.42, f"loss 20% on worker {w[0]}", [(w[0], ("loss", 0.20))]),
        (0.45, f"partition: worker {w[1]} <-> Redis and Postgres", [(w[1], "redis"), (w[1], "postgres")]),
        (0.55, f"partition: worker {w[0]} <-> Postgres", [(w[0], "postgres")]),
        (0.60, "loss 10% on every link", [(n, ("loss", 0.10)) for n in everyone]),
        (0.64, f"partition: worker {w[2]} <-> receiver", [(w[2], "receiver")]),
        (0.70, f"partition: worker {w[2]} <-> Redis", [(w[2], "redis")]),
        (0.75, "partition: producer <-> Redis and Postgres", [("p", "redis"), ("p", "postgres")]),
        (0.85, f"partition: worker {w[1]} <-> Postgres", [(w[1], "postgres")]),
        (0.92, f"partition: worker {w[0]} <-> Redis, loss 10% on every link",
         [(w[0], "redis")] + [(n, ("loss", 0.10)) for n in everyone]),
    ]


def network_faults(fleet, net, redis, pg, args, t0, stop, applied):
    """Applies network_plan over the faulty phase, on top of the delay every
    link has throughout; overlapping faults add up. Appends each fault to
    `applied` as it starts: {"at": second of the run, "start", "end" (epoch
    seconds), "what", "targets": [(namespace, fault)]}."""
    d = args.duration
    seconds = min(args.partition_seconds, 0.06 * d)
    ports = {"redis": redis.port, "postgres": pg.port, "receiver": fleet.receiver_port}
    lo, hi = (int(x) for x in args.delay.split("-"))
    delay = (lo / 2, hi / 2)  # the round trip's extra time, half each way
    timeline = []  # (when, +1/-1, index)
    plan = network_plan(args)
    for i, (at, _, _) in enumerate(plan):
        timeline += [(t0 + at * d, 1, i), (t0 + at * d + seconds, -1, i)]
    timeline.sort(key=lambda t: (t[0], -t[1]))  # at one instant, a start before an end
    active = set()

    def apply():
        for name in net.names:
            loss, block = 0.0, set()
            for i in active:
                for target, fault in plan[i][2]:
                    if target != name:
                        continue
                    if isinstance(fault, tuple):
                        loss = 1 - (1 - loss) * (1 - fault[1])
                    else:
                        block.add(ports[fault])
            net.set(name, delay_ms=delay, loss=loss, block=block)

    apply()
    applied.append({"at": 0, "start": t0, "end": t0 + d, "targets": [(n, "delay") for n in net.names],
                    "what": f"delay: every link, round trip +{args.delay} ms (uniform, half each way)"})
    for when, change, i in timeline:
        if stop.wait(max(0.0, when - time.time())):
            break
        if change > 0:
            active.add(i)
            log(f"network fault: {plan[i][1]} ({seconds:.0f}s)")
            applied.append({"at": round(time.time() - t0), "start": time.time(), "end": time.time() + seconds,
                            "what": plan[i][1], "targets": plan[i][2]})
        else:
            active.discard(i)
            log(f"network fault over: {plan[i][1]}")
        apply()
    stop.wait(max(0.0, t0 + d - time.time()))
    for name in net.names:
        net.set(name)
    log("network faults cleared")


def receiver_mode(fleet, mode, seconds):
    fleet.receiver_call(f"/mode/{mode}", "POST")
    time.sleep(seconds)
    fleet.receiver_call("/mode/path", "POST")


def interrupted_by_signal(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=50_000)
    ap.add_argument("--duration", type=int, default=600, help="seconds of emitting under faults")
    ap.add_argument("--settle", type=int, default=600, help="at most this long for the last retries")
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=None, help="each worker's slots (32; 128 with --network)")
    ap.add_argument("--kill-every", type=float, default=4.0, help="mean seconds between worker kills")
    ap.add_argument("--fault-seconds", type=int, default=20)
    ap.add_argument("--schedule", default="1s,2s,4s,8s")
    ap.add_argument("--max-retries", type=int, default=20)
    ap.add_argument("--grace", default=None, help="HOOKFLEET_QUEUE_GRACE (5s; 60s with --network)")
    ap.add_argument("--hostile", action="store_true",
                    help="the receiver answers 2xx with hostile bodies (NUL, invalid UTF-8, gzip, escapes, binary)")
    ap.add_argument("--receiver-ms", type=int, default=200,
                    help="how long the receiver takes per request: deliveries are in flight when workers die")
    ap.add_argument("--network", action="store_true",
                    help="workers and the producer in network namespaces, with delay, loss and partitions (root)")
    ap.add_argument("--delay", default="50-300",
                    help="with --network: milliseconds a round trip gains on every link, uniform LO-HI")
    ap.add_argument("--slow-endpoint-concurrency", type=int, default=None,
                    help="the workers' limit for a receiver answering slowly (default: the worker's own; "
                         "half of --concurrency with --network)")
    ap.add_argument("--partition-seconds", type=int, default=30,
                    help="with --network: how long each partition or loss lasts (at most 6%% of --duration)")
    args = ap.parse_args()
    if args.network and os.geteuid() != 0:
        raise SystemExit("--network needs root (it makes network namespaces, veth pairs and a bridge)")
    if args.network and args.workers < 2:
        raise SystemExit("--network needs at least 2 workers")
    if args.network and args.partition_seconds < 1:
        raise SystemExit("--partition-seconds must be at least 1")
    # Across the network a job holds its slot for a dozen round trips of
    # 50-300 ms (take, claim, send, record, ack), so 32 slots deliver about 10
    # events a second per worker; a round trip of up to 300 ms and lost
    # packets make many requests take over a second, which marks the receiver
    # slow and holds each worker to a sixteenth of its slots for it; and a
    # backlog older than the grace is enqueued again every grace (5 s: twenty
    # jobs a row after a minute and a half). With the loopback settings most
    # events would be delivered after the faults, not under them.
    if args.concurrency is None:
        args.concurrency = 128 if args.network else 32
    if args.grace is None:
        args.grace = "60s" if args.network else "5s"
    if args.network and args.slow_endpoint_concurrency is None:
        args.slow_endpoint_concurrency = args.concurrency // 2
    # Ctrl-C, a TERM or a closed terminal end the run through the same
    # cleanup (INT even if it was ignored when the run was started; HUP
    # only if it was not: a run under nohup goes on).
    signal.signal(signal.SIGINT, interrupted_by_signal)
    signal.signal(signal.SIGTERM, interrupted_by_signal)
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        signal.signal(signal.SIGHUP, interrupted_by_signal)

    workdir = tempfile.mkdtemp(prefix="hookfleet-chaos-")
    log(f"chaos run: {args.events} events over {args.duration}s, {args.workers} workers"
        f"{' in network namespaces' if args.network else ''}; logs in {workdir}")
    net = redis = pg = fleet = None
    try:
        if args.network:
            from netns import Network, cleanup_stale
            cleanup_stale()
            net = Network([f"w{i}" for i in range(args.workers)] + ["p"], workdir)
            net.up()
            log(f"network: the host at {net.host_ip}/{net.subnet.prefixlen} ({net.tag}h), bridged in {net.wire} to "
                + ", ".join(f"{n} at {net.ip[n]} ({net.ns(n)})" for n in net.names))
        also = [net.host_ip] if net else []
        # Chaos is about faults, not disk speed: no fsync (an immediate stop still
        # keeps everything the OS has). Commits stay synchronous: with
        # synchronous_commit=off the last commits are still in Postgres's WAL
        # buffers when the crash fault stops it, and are lost; a claim lost
        # that way lets its row be claimed again under the same token and
        # sent twice with one attempt counted (seen in a network run).
        redis = Redis(workdir, also_listen=also)
        pg = Postgres(workdir, "-c fsync=off", also_listen=also,
                      trust_network=str(net.subnet) if net else None)
        redis.start()
        pg.start()
        subprocess.run(["psql", pg.url(), "-qc", "CREATE DATABASE hookfleet"], check=True)
        fleet = Fleet(args, workdir, pg, redis, net)
        fleet.run("hookfleet", "migrate")
        fleet.start_receiver()
        secret_file = os.path.join(workdir, "secret")
        with open(secret_file, "w") as f:
            f.write(SECRET + "\n")
        r = fleet.run("hookfleet", "webhook", "add", "chaos", "--entity-type", "Sales Order", "--event", "on_submit",
                      "--url", f"{fleet.receiver_url}/slow/{args.receiver_ms}/orders", "--secret-file", secret_file,
                      "--timeout", "2s", "--max-retries", str(args.max_retries))
        assert r.returncode == 0, r.stderr
        for i in range(args.workers):
            fleet.start_worker(i)
        fleet.start_sweepers()

        t0 = fleet.t0 = time.time()
        stop, done = threading.Event(), threading.Event()
        applied = []
        threads = [
            threading.Thread(target=producer, args=(fleet, args, t0 + args.duration * 0.9, done), daemon=True),
            threading.Thread(target=killer, args=(fleet, args, stop), daemon=True),
            threading.Thread(target=faults, args=(fleet, pg, redis, args, t0, stop), daemon=True),
        ]
        if net:
            threads.append(threading.Thread(target=network_faults,
                                            args=(fleet, net, redis, pg, args, t0, stop, applied), daemon=True))
        for t in threads:
            t.start()
        # Bounded: a producer still not done after the settle time is reported
        # (its missing events count as lost).
        while (time.time() < t0 + args.duration or not done.is_set()) \
                and time.time() < t0 + args.duration + args.settle:
            time.sleep(5)
            try:
                counts = pg.query("SELECT status || '=' || count(*) FROM webhook_request_logs GROUP BY status")
                log(f"rows: {counts.replace(chr(10), ' ')}; kills so far {fleet.kills}")
            except subprocess.CalledProcessError:
                log("rows: (Postgres is down)")
            if net and not all(net.netem_alive().values()):
                log(f"a netem is gone (its link runs clean): {net.netem_alive()}")
        stop.set()
        for t in threads:
            t.join(timeout=60)
        log(f"faults over after {time.time() - t0:.0f}s; waiting until every row is terminal")

        settle_end = time.time() + args.settle
        while True:
            pending = int(pg.query("SELECT count(*) FROM webhook_request_logs WHERE status IN ('Queued','Failed')"))
            if pending == 0 or time.time() > settle_end:
                break
            log(f"{pending} rows still pending")
            time.sleep(5)
        settled_after = time.time() - t0
        report(fleet, pg, args, settled_after, net, applied)
    finally:
        # The cleanup itself is bounded; a second Ctrl-C must not cut it short.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if fleet:
            fleet.stop_all()
        if pg:
            pg.crash()
        if redis:
            redis.stop()
        if net:
            net.down()
            log("network removed (namespaces, veths, bridge, netems)")


def explain_duplicates(pg, rows, accepted):
    """Explains, event by event, every 2xx the receiver answered.

    Each 2xx the receiver answered is one attempt of that event, and an
    attempt ends in exactly one of these ways:
      - recorded with its 2xx: the one that made the row Delivered, or a
        *fenced* one (an attempt number below the row's last claim): its
        outcome came after its lease ran out and a later claim had taken the
        row, so the row refused it (its attempt row is kept). The worker was
        cut off between send and record (a partition from Postgres, a
        stall); `stale` if it even started after a later claim's attempt
        (it sent on a claim already superseded);
      - *interrupted*: counted on the row by its claim, never recorded (the
        worker was killed, or never came back, between claim and record);
      - *lost answer*: recorded as "timed out" or "request failed" after the
        request went out: the receiver's 2xx never reached the worker in
        time (a link that drops or delays the answer), so it was retried.
    So per event: 2xx answered <= recorded 2xx + interrupted + lost answers,
    and every duplicate (a 2xx beyond the first) is charged to one of the
    event's own surplus attempts: fenced ones first (certain: the worker saw
    the 2xx), then interrupted, then lost answers. A duplicate left over is
    unexplained. Returns the totals by kind."""
    attempts = {}
    for line in pg.query(
            "SELECT l.event_id, a.attempt, coalesce(a.response_code, 0), "
            "coalesce(a.error LIKE 'timed out%' OR a.error LIKE 'request failed%', false)::int, "
            "extract(epoch from a.started_at), a.worker FROM webhook_delivery_attempts a "
            "JOIN webhook_request_logs l ON l.id = a.log_id").splitlines():
        event_id, attempt, code, lost, started, worker = line.split("|", 5)
        attempts.setdefault(event_id, []).append((int(attempt), int(code), lost == "1", float(started), worker))
    kinds = Counter()
    unexplained_ids = []
    charged = []  # (event id, attempt, started, worker, kind) of the recorded attempts charged with a duplicate
    for event_id, (status, claims, _) in rows.items():
        mine = attempts.get(event_id, [])
        ok = [a for a in mine if 200 <= a[1] < 300]
        fenced = [a for a in ok if a[0] < claims]
        stale = [a for a in fenced if any(b[0] > a[0] and b[3] < a[3] for b in mine)]
        late = [a for a in fenced if a not in stale]
        interrupted = max(0, claims - len(mine))
        lost = sorted((a for a in mine if a[2]), key=lambda a: a[3])
        kinds["interrupted_attempts"] += interrupted
        kinds["fenced_2xx"] += len(fenced)
        n = accepted.get(event_id, 0)
        if n < len(ok):
            kinds["recorded_2xx_not_answered"] += len(ok) - n
        first = 1 if (n and not ok) else 0  # the first 2xx, when no recorded 2xx is it
        if first and interrupted:
            interrupted, first = interrupted - 1, 0
        if first and lost:
            lost, first = lost[1:], 0
        if first:
            kinds["first_2xx_unexplained"] += 1
            unexplained_ids.append(event_id)
        dup = max(0, n - 1)
        for kind, pool in (("dup_fenced_stale", stale), ("dup_fenced_late_record", late),
                           ("dup_interrupted", [None] * interrupted), ("dup_lost_answer", lost)):
            for a in pool[:dup]:
                kinds[kind] += 1
                if a is not None:
                    charged.append((event_id, a[0], a[3], a[4], kind))
            dup -= min(dup, len(pool))
        if dup:
            kinds["dup_unexplained"] += dup
            unexplained_ids.append(event_id)
    return kinds, unexplained_ids, charged


# How a duplicate's recorded attempt is named in the table, and the window
# (seconds before its start, after a fault's end) in which a network fault on
# its worker counts as its cause: a fenced attempt was cut off between send
# and record (the record comes after the attempt), a lost answer's request
# waited up to the timeout (2 s) for an answer.
CHARGED = {
    "dup_fenced_late_record": ("fenced 2xx", 10),
    "dup_fenced_stale": ("fenced 2xx sent on a superseded claim", 10),
    "dup_lost_answer": ("lost answer", 2),
}


def attribute(charged, fleet, applied):
    """For each recorded attempt charged with a duplicate: the network faults
    on its worker's namespace around it (see CHARGED), or "delay only".
    Returns a Counter by (kind, faults) and a list of (event, attempt, second
    of the run, namespace, kind, faults) for the JSON."""
    by_fault, detail = Counter(), []
    for event_id, attempt, started, worker, kind in charged:
        label, before = CHARGED[kind]
        pid = worker.split(":")[1] if worker.count(":") >= 2 else ""
        ns = fleet.worker_pids.get(int(pid)) if pid.isdigit() else None
        on = [a["what"] for a in applied
              if a["at"] > 0 and any(t == ns for t, _ in a["targets"]) and a["start"] - before <= started <= a["end"]]
        by_fault[(label, " + ".join(on) if on else "delay only (no other network fault on its worker)")] += 1
        detail.append((event_id, attempt, round(started - fleet.t0), ns, kind, on))
    return by_fault, detail


def report(fleet, pg, args, seconds, net=None, applied=()):
    rows = {}
    for line in pg.query("SELECT event_id, status, attempts, coalesce(error, '') FROM webhook_request_logs").splitlines():
        event_id, status, attempts, error = line.split("|", 3)
        rows[event_id] = (status, int(attempts), error)
    received = fleet.receiver_call("/ids")
    ids = fleet.receiver_call("/accepted")
    stats = fleet.receiver_call("/stats")
    status = Counter(s for s, _, _ in rows.values())
    never = {e: r for e, r in rows.items() if e not in ids}
    delivered_unseen = [e for e, r in never.items() if r[0] == "Delivered"]
    duplicates = sum(n - 1 for n in ids.values() if n > 1)
    dup_ids = sum(1 for n in ids.values() if n > 1)
    kinds, unexplained_ids, charged = explain_duplicates(pg, rows, ids)
    by_fault, charged_detail = attribute(charged, fleet, applied) if net else (Counter(), [])
    under_faults = int(pg.query(
        "SELECT count(*) FROM webhook_delivery_attempts WHERE response_code BETWEEN 200 AND 299 "
        f"AND started_at < to_timestamp({fleet.t0 + args.duration})"))
    interrupted = kinds["interrupted_attempts"]
    explained = not unexplained_ids
    unknown = [i for i in received if i not in rows]
    # Dead letters lose nothing (the row stays and the sweeper sends it
    # again), but each is a job some worker gave up on: worth a count.
    dead = subprocess.run(["redis-cli", "-p", str(fleet.redis.port), "LLEN", "chaos:dead"],
                          capture_output=True, text=True).stdout.strip()
    exhausted_reasons = Counter(err.split(" (attempt")[0] for s, _, err in rows.values() if s == "Exhausted")
    netem = net.stats() if net else {}
    out = {
        "mode": "network" if net else "loopback",
        "events_emitted": len(rows),
        "events_expected": args.events,
        "delivered": status.get("Delivered", 0),
        "exhausted": status.get("Exhausted", 0),
        "exhausted_reasons": dict(exhausted_reasons),
        "never_received": len(never),
        "never_received_not_exhausted": len([e for e, r in never.items() if r[0] != "Exhausted"]),
        "delivered_but_never_received": len(delivered_unseen),
        "duplicate_deliveries": duplicates,
        "ids_received_more_than_once": dup_ids,
        "interrupted_attempts": interrupted,
        "explanation": dict(kinds),
        "unexplained_event_ids": unexplained_ids[:100],
        "charged_duplicates": charged_detail if net else [list(c) for c in charged],
        "charged_duplicates_by_fault": [[k, f, n] for (k, f), n in by_fault.most_common()],
        "attempts_2xx_while_faults_on": under_faults,
        "worker_kills": fleet.kills,
        "producer_retries": fleet.producer_retries,
        "unknown_webhook_ids": len(unknown),
        "bad_signatures": stats.get("bad_signatures", 0),
        "receipts": stats.get("requests", 0),
        "non_terminal": status.get("Queued", 0) + status.get("Failed", 0),
        "dead_letters": dead,
        "seconds": round(seconds),
        "network_faults": list(applied),
        "netem": netem,
    }
    print()
    print("chaos run result")
    print(f"  events emitted                      {out['events_emitted']} (expected {args.events})")
    print(f"  rows Delivered / Exhausted          {out['delivered']} / {out['exhausted']}")
    for reason, n in exhausted_reasons.items():
        print(f"    Exhausted: {n} × {reason}")
    print(f"  events never received               {out['never_received']} "
          f"({out['never_received_not_exhausted']} of them not Exhausted; {len(delivered_unseen)} Delivered but unseen)")
    print(f"  receipts at the receiver            {stats.get('requests', 0)} (retries after failures included)")
    print(f"  duplicate deliveries (2xx twice)    {duplicates} (on {dup_ids} webhook-ids)")
    print(f"    explained by an interrupted attempt (claimed, never recorded)      {kinds['dup_interrupted']}")
    print(f"    explained by a fenced 2xx (recorded after a later claim took the row)  "
          f"{kinds['dup_fenced_late_record']}")
    print(f"    explained by a fenced 2xx sent after a later claim's attempt started  {kinds['dup_fenced_stale']}")
    print(f"    explained by a lost answer (2xx answered, recorded as timed out/failed) {kinds['dup_lost_answer']}")
    print(f"    unexplained                                                        "
          f"{kinds['dup_unexplained'] + kinds['first_2xx_unexplained']}")
    print(f"  interrupted attempts (claimed, never recorded)        {interrupted}, from {fleet.kills} kills")
    print(f"  fenced 2xx attempts (outcome refused: a later claim)  {kinds['fenced_2xx']}")
    for (kind, fault), n in by_fault.most_common():
        print(f"    duplicates by a {kind}, their worker under: {fault}: {n}")
    print(f"  every duplicate explained (event by event)            {'yes' if explained else 'NO'}")
    print(f"  attempts answered 2xx while the faults were on        {under_faults}")
    print(f"  duplicates carried their event's webhook-id           "
          f"{'yes' if not unknown else 'NO: ' + str(len(unknown)) + ' unknown ids'}")
    print(f"  bad signatures at the receiver      {out['bad_signatures']}")
    print(f"  rows left non-terminal              {out['non_terminal']}")
    print(f"  producer batches sent again         {fleet.producer_retries}")
    print(f"  dead letters in Redis at the end    {dead} (their rows are sent by the sweeper)")
    if net:
        total = Counter()
        for n, st in netem.items():
            total.update({k: v for k, v in st.items() if k in ("seen", "delayed", "lost", "partitioned")})
        print(f"  packets through the namespaces' links  {total['seen']} ({total['delayed']} delayed, "
              f"{total['lost']} lost at random, {total['partitioned']} dropped by partitions)")
    print(f"  total seconds                       {out['seconds']}")
    os.makedirs("bench/out", exist_ok=True)
    path = time.strftime("bench/out/chaos-%Y%m%dT%H%M%S.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=2)
    print(f"  (saved to {path})")
    write_doc(out, args, exhausted_reasons, delivered_unseen, unknown, duplicates, dup_ids, kinds, explained,
              fleet.kills, net, applied, by_fault)
    ok = (out["never_received_not_exhausted"] == 0 and not delivered_unseen and out["non_terminal"] == 0
          and not unknown and out["bad_signatures"] == 0 and explained
          and out["events_emitted"] == args.events)
    if not ok:
        sys.exit(1)


DOC = "docs/CHAOS.md"


def replace_section(mode, text):
    """Puts `text` between this mode's markers in docs/CHAOS.md (appended
    if the markers are missing); the rest of the file is left as written."""
    begin, end = f"<!-- {mode} run: written by bench/chaos.py -->", f"<!-- end of {mode} run -->"
    try:
        with open(DOC) as f:
            doc = f.read()
    except FileNotFoundError:
        doc = "# The chaos run\n"
    block = f"{begin}\n{text}{end}"
    if begin in doc and end in doc:
        doc = doc[:doc.index(begin)] + block + doc[doc.index(end) + len(end):]
    else:
        doc = doc.rstrip("\n") + "\n\n" + block + "\n"
    with open(DOC, "w") as f:
        f.write(doc)


def write_doc(out, args, reasons, delivered_unseen, unknown, duplicates, dup_ids, kinds, explained, kills,
              net, applied, by_fault):
    """docs/CHAOS.md: the latest run's table for its mode, with when, where and how."""
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    reasons_text = "".join(f"\n| Exhausted: {r} | {n} |" for r, n in reasons.items())
    hostile_text = (" Every answer it accepts carries hostile bytes (NUL, invalid UTF-8, gzip,\n"
                    "terminal escapes, 64 KiB of binary), in turn." if args.hostile else "")
    where = ("in network namespaces of their own (below), " if net else "")
    network_text = ""
    if net:
        seconds = min(args.partition_seconds, 0.06 * args.duration)
        faults = "\n".join(f"| {a['at']} | {a['what']} |" for a in applied)
        total = Counter()
        for st in out["netem"].values():
            total.update({k: v for k, v in st.items() if k in ("seen", "delayed", "lost", "partitioned")})
        network_text = f"""
The workers and the producer each ran in a namespace of their own, joined to
the services on the host through veth pairs and a bridge in a namespace of
its own (the wire): every packet was delayed so a round trip gained {args.delay} ms,
and these faults came on top, each for {seconds:.0f} s (second of the run, what):

| s | network fault |
| ---: | --- |
{faults}

Packets through the namespaces' links: {total['seen']}, of them {total['delayed']} delayed,
{total['lost']} lost at random and {total['partitioned']} dropped by partitions.
The workers had {args.concurrency} slots each and kept {args.slow_endpoint_concurrency} for a receiver answering slowly,
and the grace was {args.grace}: across these round trips a job holds its slot for
a dozen of them, many requests take over a second, and a backlog older than
the grace is enqueued again every grace, so with the loopback settings most
events would be delivered after the faults instead of under them.
"""
    by_fault_text = "".join(f"\n| ... by a {k}, the worker under: {f} | {n} |"
                            for (k, f), n in sorted(by_fault.items()))
    text = f"""Latest run: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, on {os.cpu_count()} cores and {mem:.0f} GiB.
Command: `scripts/chaos.sh {' '.join(sys.argv[1:])}`

A fleet under faults, counted at a receiver that verifies both signatures:
{args.workers} workers (concurrency {args.concurrency}) {where}killed with SIGKILL about every
{args.kill_every:g} s and restarted; a Redis restart (everything lost); a Postgres
crash and restart; the receiver hanging, answering 500, and dropping
connections, {args.fault_seconds} s each; two sweepers ticking every second; retry schedule
`{args.schedule}`, max_retries {args.max_retries}, grace {args.grace}. The receiver takes {args.receiver_ms} ms
per request, so kills land mid-delivery.{hostile_text} Its own Redis and
Postgres, on spare ports.
{network_text}
| what | count |
| --- | ---: |
| events emitted | {out['events_emitted']} (of {args.events}) |
| rows Delivered | {out['delivered']} |
| rows Exhausted | {out['exhausted']} |{reasons_text}
| events never received | {out['never_received']} ({out['never_received_not_exhausted']} not Exhausted) |
| rows Delivered that the receiver never accepted | {len(delivered_unseen)} |
| receipts at the receiver (retries after failures included) | {out['receipts']} |
| duplicate deliveries (a webhook-id answered 2xx twice) | {duplicates} (on {dup_ids} ids) |
| ... explained by an interrupted attempt (claimed, never recorded) | {kinds['dup_interrupted']} |
| ... explained by a fenced 2xx (its outcome came after a later claim took the row) | {kinds['dup_fenced_late_record']} |
| ... explained by a fenced 2xx sent after a later claim's attempt had started | {kinds['dup_fenced_stale']} |
| ... explained by a lost answer (2xx answered, recorded as timed out or failed) | {kinds['dup_lost_answer']} |
| ... unexplained | {kinds['dup_unexplained'] + kinds['first_2xx_unexplained']} |{by_fault_text}
| interrupted attempts (claimed, never recorded) | {kinds['interrupted_attempts']}, from {kills} kills |
| fenced 2xx attempts (a 2xx whose outcome the row refused) | {kinds['fenced_2xx']} |
| every duplicate explained, event by event | {'yes' if explained else 'NO'} |
| attempts answered 2xx while the faults were on | {out['attempts_2xx_while_faults_on']} |
| receipts with a webhook-id of no event | {len(unknown)} |
| bad signatures | {out['bad_signatures']} |
| rows left non-terminal | {out['non_terminal']} |
| producer batches sent again (failed or cut off; same event ids) | {out['producer_retries']} |
| dead letters left in Redis (jobs given up on; their rows stay, and are sent) | {out['dead_letters']} |
| seconds | {out['seconds']} |
"""
    replace_section(out["mode"], text)
    print(f"  (wrote the {out['mode']} run's section of {DOC})")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt as e:
        log(f"interrupted ({e or 'Ctrl-C'}); everything the run started is stopped and removed")
        sys.exit(130)
