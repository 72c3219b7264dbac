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

Then it stops the faults, waits until every row is terminal, and prints what
arrived: events emitted, rows Delivered / Exhausted, events never received
(with reasons), duplicate receipts and the interrupted attempts that explain
them, unknown webhook-ids, bad signatures, rows left non-terminal.

Bounded in time: --duration for the faulty phase, then at most --settle
seconds for the last retries.
"""
import argparse
import json
import os
import random
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
    def __init__(self, args, workdir, pg, redis):
        self.args, self.workdir, self.pg, self.redis = args, workdir, pg, redis
        self.receiver_port = spare_port()
        self.env = dict(os.environ, DATABASE_URL=pg.url("hookfleet"), REDIS_URL=redis.url,
                        HOOKFLEET_REDIS_PREFIX="chaos:", HOOKFLEET_ALLOWED_NETWORKS="127.0.0.1/32",
                        HOOKFLEET_RETRY_SCHEDULE=args.schedule, HOOKFLEET_QUEUE_GRACE=args.grace,
                        RUST_LOG="info")
        self.workers = [None] * args.workers
        self.sweepers = []
        self.receiver = None
        self.kills = 0
        self.lock = threading.Lock()

    def logfile(self, name):
        return open(os.path.join(self.workdir, name + ".log"), "ab")

    def start_receiver(self):
        self.receiver = subprocess.Popen(
            [os.path.join(BIN, "hookfleet-bench-receiver"), f"127.0.0.1:{self.receiver_port}", "--secret", SECRET]
            + (["--hostile"] if self.args.hostile else []),
            stdout=subprocess.DEVNULL, stderr=self.logfile("receiver"))
        wait_port(self.receiver_port)

    def receiver_call(self, path, method="GET"):
        req = urllib.request.Request(f"http://127.0.0.1:{self.receiver_port}{path}", method=method)
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read()) if path in ("/stats", "/ids", "/accepted") else r.read()

    def start_worker(self, i):
        self.workers[i] = subprocess.Popen(
            [os.path.join(BIN, "hookfleet-worker"), "--concurrency", str(self.args.concurrency),
             "--heartbeat-ttl", "3s", "--lease-margin", "2s", "--drain-timeout", "5s"],
            env=self.env, stdout=subprocess.DEVNULL, stderr=self.logfile(f"worker-{i}"))

    def start_sweepers(self):
        for i in range(2):
            self.sweepers.append(subprocess.Popen(
                [os.path.join(BIN, "hookfleet-sweeper"), "--interval", "1s", "--batch-size", "1000"],
                env=self.env, stdout=subprocess.DEVNULL, stderr=self.logfile(f"sweeper-{i}")))

    def run(self, binary, *args, stdin=None):
        return subprocess.run([os.path.join(BIN, binary), *args], env=self.env, capture_output=True, text=True,
                              input=stdin)

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
            r = fleet.run("hookfleet-producer", "emit", "--batch", "-", "--batch-size", "500",
                          stdin="\n".join(lines) + "\n")
            if r.returncode == 0:
                break
            log(f"producer: batch {b} failed ({r.stderr.strip()[:120]}); retrying")
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


def receiver_mode(fleet, mode, seconds):
    fleet.receiver_call(f"/mode/{mode}", "POST")
    time.sleep(seconds)
    fleet.receiver_call("/mode/path", "POST")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=50_000)
    ap.add_argument("--duration", type=int, default=600, help="seconds of emitting under faults")
    ap.add_argument("--settle", type=int, default=600, help="at most this long for the last retries")
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--kill-every", type=float, default=4.0, help="mean seconds between worker kills")
    ap.add_argument("--fault-seconds", type=int, default=20)
    ap.add_argument("--schedule", default="1s,2s,4s,8s")
    ap.add_argument("--max-retries", type=int, default=20)
    ap.add_argument("--grace", default="5s")
    ap.add_argument("--hostile", action="store_true",
                    help="the receiver answers 2xx with hostile bodies (NUL, invalid UTF-8, gzip, escapes, binary)")
    ap.add_argument("--receiver-ms", type=int, default=200,
                    help="how long the receiver takes per request: deliveries are in flight when workers die")
    args = ap.parse_args()

    workdir = tempfile.mkdtemp(prefix="hookfleet-chaos-")
    log(f"chaos run: {args.events} events over {args.duration}s, {args.workers} workers; logs in {workdir}")
    # Chaos is about faults, not disk speed: no fsync (an immediate stop still
    # keeps everything the OS has).
    redis, pg = Redis(workdir), Postgres(workdir, "-c fsync=off -c synchronous_commit=off")
    redis.start()
    pg.start()
    subprocess.run(["psql", pg.url(), "-qc", "CREATE DATABASE hookfleet"], check=True)
    fleet = Fleet(args, workdir, pg, redis)
    try:
        fleet.run("hookfleet", "migrate")
        fleet.start_receiver()
        secret_file = os.path.join(workdir, "secret")
        with open(secret_file, "w") as f:
            f.write(SECRET + "\n")
        r = fleet.run("hookfleet", "webhook", "add", "chaos", "--entity-type", "Sales Order", "--event", "on_submit",
                      "--url", f"http://127.0.0.1:{fleet.receiver_port}/slow/{args.receiver_ms}/orders", "--secret-file", secret_file,
                      "--timeout", "2s", "--max-retries", str(args.max_retries))
        assert r.returncode == 0, r.stderr
        for i in range(args.workers):
            fleet.start_worker(i)
        fleet.start_sweepers()

        t0 = time.time()
        stop, done = threading.Event(), threading.Event()
        threads = [
            threading.Thread(target=producer, args=(fleet, args, t0 + args.duration * 0.9, done), daemon=True),
            threading.Thread(target=killer, args=(fleet, args, stop), daemon=True),
            threading.Thread(target=faults, args=(fleet, pg, redis, args, t0, stop), daemon=True),
        ]
        for t in threads:
            t.start()
        while time.time() < t0 + args.duration or not done.is_set():
            time.sleep(5)
            try:
                counts = pg.query("SELECT status || '=' || count(*) FROM webhook_request_logs GROUP BY status")
                log(f"rows: {counts.replace(chr(10), ' ')}; kills so far {fleet.kills}")
            except subprocess.CalledProcessError:
                log("rows: (Postgres is down)")
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
        report(fleet, pg, args, settled_after)
    finally:
        fleet.stop_all()
        pg.crash()
        redis.stop()


def report(fleet, pg, args, seconds):
    rows = {}
    for line in pg.query("SELECT event_id, status, attempts, coalesce(error, '') FROM webhook_request_logs").splitlines():
        event_id, status, attempts, error = line.split("|", 3)
        rows[event_id] = (status, int(attempts), error)
    recorded = dict(tuple(l.split("|")) for l in pg.query(
        "SELECT l.event_id, count(a.attempt) FROM webhook_request_logs l LEFT JOIN webhook_delivery_attempts a "
        "ON a.log_id = l.id GROUP BY l.event_id").splitlines())
    received = fleet.receiver_call("/ids")
    ids = fleet.receiver_call("/accepted")
    stats = fleet.receiver_call("/stats")
    status = Counter(s for s, _, _ in rows.values())
    never = {e: r for e, r in rows.items() if e not in ids}
    delivered_unseen = [e for e, r in never.items() if r[0] == "Delivered"]
    duplicates = sum(n - 1 for n in ids.values() if n > 1)
    dup_ids = sum(1 for n in ids.values() if n > 1)
    interrupted = sum(max(0, attempts - int(recorded.get(e, 0))) for e, (_, attempts, _) in rows.items())
    unknown = [i for i in received if i not in rows]
    exhausted_reasons = Counter(err.split(" (attempt")[0] for s, _, err in rows.values() if s == "Exhausted")
    out = {
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
        "worker_kills": fleet.kills,
        "unknown_webhook_ids": len(unknown),
        "bad_signatures": stats.get("bad_signatures", 0),
        "receipts": stats.get("requests", 0),
        "non_terminal": status.get("Queued", 0) + status.get("Failed", 0),
        "seconds": round(seconds),
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
    print(f"  interrupted attempts (kill between claim and record)  {interrupted}, from {fleet.kills} kills")
    print(f"  every duplicate explained by an interrupted attempt   {'yes' if duplicates <= interrupted else 'NO'}")
    print(f"  duplicates carried their event's webhook-id           "
          f"{'yes' if not unknown else 'NO: ' + str(len(unknown)) + ' unknown ids'}")
    print(f"  bad signatures at the receiver      {out['bad_signatures']}")
    print(f"  rows left non-terminal              {out['non_terminal']}")
    print(f"  total seconds                       {out['seconds']}")
    os.makedirs("bench/out", exist_ok=True)
    path = time.strftime("bench/out/chaos-%Y%m%dT%H%M%S.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=2)
    print(f"  (saved to {path})")
    write_doc(out, args, exhausted_reasons, delivered_unseen, unknown, duplicates, dup_ids, interrupted, fleet.kills)
    ok = (out["never_received_not_exhausted"] == 0 and not delivered_unseen and out["non_terminal"] == 0
          and not unknown and out["bad_signatures"] == 0 and duplicates <= interrupted
          and out["events_emitted"] == args.events)
    if not ok:
        sys.exit(1)


def write_doc(out, args, reasons, delivered_unseen, unknown, duplicates, dup_ids, interrupted, kills):
    """docs/CHAOS.md: the latest run's table, with when, where and how."""
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    reasons_text = "".join(f"\n| Exhausted: {r} | {n} |" for r, n in reasons.items())
    hostile_text = (" Every answer it accepts carries hostile bytes (NUL, invalid UTF-8, gzip,\n"
                    "terminal escapes, 64 KiB of binary), in turn." if args.hostile else "")
    text = f"""# The chaos run

Latest run: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, on {os.cpu_count()} cores and {mem:.0f} GiB.
Command: `scripts/chaos.sh {' '.join(sys.argv[1:])}`

A fleet under faults, counted at a receiver that verifies both signatures:
{args.workers} workers (concurrency {args.concurrency}) killed with SIGKILL about every
{args.kill_every:g} s and restarted; a Redis restart (everything lost); a Postgres
crash and restart; the receiver hanging, answering 500, and dropping
connections, {args.fault_seconds} s each; two sweepers ticking every second; retry schedule
`{args.schedule}`, max_retries {args.max_retries}, grace {args.grace}. The receiver takes {args.receiver_ms} ms
per request, so kills land mid-delivery.{hostile_text} Its own Redis and
Postgres, on spare ports.

| what | count |
| --- | ---: |
| events emitted | {out['events_emitted']} (of {args.events}) |
| rows Delivered | {out['delivered']} |
| rows Exhausted | {out['exhausted']} |{reasons_text}
| events never received | {out['never_received']} ({out['never_received_not_exhausted']} not Exhausted) |
| rows Delivered that the receiver never accepted | {len(delivered_unseen)} |
| receipts at the receiver (retries after failures included) | {out['receipts']} |
| duplicate deliveries (a webhook-id answered 2xx twice) | {duplicates} (on {dup_ids} ids) |
| interrupted attempts (claimed, never recorded: a kill between claim and record) | {interrupted}, from {kills} kills |
| every duplicate explained by an interrupted attempt | {'yes' if duplicates <= interrupted else 'NO'} |
| receipts with a webhook-id of no event | {len(unknown)} |
| bad signatures | {out['bad_signatures']} |
| rows left non-terminal | {out['non_terminal']} |
| seconds | {out['seconds']} |

A duplicate can only come from a worker killed after the receiver answered
and before the outcome was written; it carries the event's `webhook-id`, so
the receiver can drop it.
"""
    with open("docs/CHAOS.md", "w") as f:
        f.write(text)
    print("  (wrote docs/CHAOS.md)")


if __name__ == "__main__":
    main()
