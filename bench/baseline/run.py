#!/usr/bin/env python3
"""Baseline throughput: N Frappe-style webhook jobs through RQ workers.

usage: run.py --events N --workers K [--fork]

Enqueues N jobs (each POSTs a ~342-byte body to the bench receiver and logs
one row), then runs K `rq worker --burst` processes until the queue is empty,
and prints deliveries per second. Without --fork the workers are RQ's
SimpleWorker (no fork per job: the fastest RQ gets); with --fork, RQ's
default forking worker, as Frappe runs it by default.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import psycopg
from redis import Redis
from rq import Queue

HERE = os.path.dirname(os.path.abspath(__file__))
PAD = "x" * 180


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=5000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--fork", action="store_true")
    ap.add_argument("--receiver", default="http://127.0.0.1:18090/ok/baseline")
    a = ap.parse_args()
    db = os.environ["BASELINE_DATABASE_URL"]
    with psycopg.connect(db) as conn:
        conn.execute("DROP TABLE IF EXISTS webhook_request_log")
        conn.execute("""CREATE TABLE webhook_request_log (
            name BIGSERIAL PRIMARY KEY, event_id TEXT, url TEXT, data TEXT, headers TEXT,
            response_code INT, status TEXT, error TEXT, creation TIMESTAMPTZ DEFAULT now())""")
    redis = Redis.from_url(os.environ.get("BASELINE_REDIS_URL", "redis://127.0.0.1:6379/0"))
    qname = f"hookfleet-baseline-{os.getpid()}"
    q = Queue(qname, connection=redis)
    sys.path.insert(0, HERE)
    import frappe_job  # noqa: E402  (the job must be importable by the workers)

    with redis.pipeline() as pipe:
        for i in range(a.events):
            doc = {"name": f"SO-{i:07d}", "customer": "ACME Corporation", "grand_total": 1234.5 + i,
                   "status": "Submitted", "items": [{"sku": "A-1", "qty": 2}], "note": PAD}
            q.enqueue(frappe_job.enqueue_webhook, a.receiver, json.dumps(doc), "bench-secret", f"b-{i}",
                      pipeline=pipe)
        pipe.execute()
    worker_class = "rq.worker.Worker" if a.fork else "rq.worker.SimpleWorker"
    env = dict(os.environ, PYTHONPATH=HERE)
    t0 = time.monotonic()
    rq = os.path.join(os.path.dirname(sys.executable), "rq")
    procs = [subprocess.Popen([rq, "worker", "--burst", "--quiet", "--worker-class", worker_class,
                               "--url", os.environ.get("BASELINE_REDIS_URL", "redis://127.0.0.1:6379/0"), qname],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for _ in range(a.workers)]
    for p in procs:
        p.wait()
    seconds = time.monotonic() - t0
    with psycopg.connect(db) as conn:
        delivered = conn.execute("SELECT count(*) FROM webhook_request_log WHERE status = 'Delivered'").fetchone()[0]
    redis.delete(*[k for k in redis.scan_iter(f"rq:*{qname}*")] or ["-"])
    print(json.dumps({"events": a.events, "workers": a.workers, "fork": a.fork, "seconds": round(seconds, 3),
                      "delivered": delivered, "deliveries_per_s": round(delivered / seconds)}))


if __name__ == "__main__":
    main()
