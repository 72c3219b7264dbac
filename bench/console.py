"""Console benchmark: page and API times at 1 million delivery rows
(`scripts/bench.sh --only console --no-report`, about 3 minutes).

Seeds 1,000,000 delivery rows over 8 webhooks (90% Delivered, 8% Failed, 2%
Exhausted, ~250-byte bodies, created over the last 7 days, one attempt
each, the last hour's attempts spread over its minutes), with every
production index, then VACUUM ANALYZE. Starts `hookfleet console` (debug
log: each request's server time) and asks each page or API route
`--console-repeats` times (default 10) with a session or a token. Prints
one JSON document: per request, the server's median and max time from the
log (`ms=`) and the client's median.

Requests: the overview (stats, the last hour's chart, queues, workers); a
webhook's page with its newest 50 deliveries; the deliveries page and the
API list filtered by webhook and status; by document name (found, and not
found: the worst case, a walk of the table stopped by the 10 s limit); by
event id; one delivery.
"""
import json
import os
import re
import statistics
import subprocess
import time
import urllib.parse
import urllib.request

import bench as B
from services import spare_port, wait_port

ROWS = int(os.environ.get("HOOKFLEET_BENCH_CONSOLE_ROWS", 1_000_000))
TOKEN = "bench-console-token-0123456789"

SEED = """
INSERT INTO webhook_request_logs (event_id, webhook_id, webhook_name, entity_type, entity_name, event,
    url, method, headers, body, queue, status, attempts, max_attempts, next_retry, error, response_code,
    created_at, updated_at)
SELECT 'msg_' || lpad(to_hex(g), 32, '0'), 1 + g % 8, 'bench-' || (g % 8), 'Doc' || (g % 8),
    'SO-' || lpad(g::text, 7, '0'), 'on_submit', 'http://127.0.0.1:9/ok/' || (g % 8), 'POST', '[]',
    '{{"name": "SO-' || g || '", "note": "{pad}"}}', 'default',
    (CASE WHEN (g / 8) % 50 = 0 THEN 'Exhausted' WHEN (g / 8) % 12 = 0 THEN 'Failed'
          ELSE 'Delivered' END)::delivery_status,
    1, 4,
    CASE WHEN (g / 8) % 50 <> 0 AND (g / 8) % 12 = 0 THEN now() + interval '1 hour' END,
    CASE WHEN (g / 8) % 50 = 0 OR (g / 8) % 12 = 0 THEN 'HTTP 500' END,
    CASE WHEN (g / 8) % 50 = 0 OR (g / 8) % 12 = 0 THEN 500 ELSE 200 END,
    now() - ((({rows} - g)::float / {rows}) * interval '7 days'),
    now() - ((({rows} - g)::float / {rows}) * interval '7 days')
FROM generate_series(1, {rows}) g
"""

ATTEMPTS = """
INSERT INTO webhook_delivery_attempts (log_id, attempt, started_at, duration_ms, response_code, error, worker)
SELECT id, 1, created_at, 12, response_code, error, 'bench' FROM webhook_request_logs
"""


def requests_to_time(fleet_db_psql):
    some = fleet_db_psql("SELECT entity_name FROM webhook_request_logs WHERE id = 500000")
    event_id = fleet_db_psql("SELECT event_id FROM webhook_request_logs WHERE id = 500001")
    return [
        ("overview page", "page", "/"),
        ("webhook page (its newest 50)", "page", "/webhooks/bench-3"),
        ("deliveries page, webhook and status", "page", "/deliveries?webhook=bench-3&status=Failed"),
        ("search page, a document", "page", "/deliveries?q=" + urllib.parse.quote(some)),
        ("delivery page", "page", "/deliveries/500000"),
        ("API list, webhook and status", "api", "/api/v1/deliveries?webhook=bench-3&status=Failed"),
        ("API list, a document", "api", "/api/v1/deliveries?document=" + urllib.parse.quote(some)),
        ("API list, an event id", "api", "/api/v1/deliveries?event_id=" + event_id),
        ("API list, a document that is not there", "api", "/api/v1/deliveries?document=SO-none"),
        ("API list, since 1h, 200 rows", "api", "/api/v1/deliveries?since=1h&limit=200"),
        ("API stats", "api", "/api/v1/stats"),
        ("API activity", "api", "/api/v1/activity"),
    ]


def run(bench, a):
    repeats = a.console_repeats
    fleet = B.Fleet(bench, 8)
    log_path = os.path.join(bench.workdir, "console.log")
    try:
        t0 = time.monotonic()
        bench.psql(fleet.db, SEED.format(rows=ROWS, pad=B.PAD))
        bench.psql(fleet.db, ATTEMPTS)
        bench.psql(fleet.db, "VACUUM ANALYZE")
        B.log(f"seeded {ROWS} rows in {time.monotonic() - t0:.0f}s")
        port = spare_port()
        env = dict(fleet.env, RUST_LOG="hookfleet_console=debug,info")
        with open(log_path, "w") as logf:
            console = subprocess.Popen([os.path.join(B.BIN, "hookfleet"), "console", "--listen",
                                        f"127.0.0.1:{port}", "--token", TOKEN], env=env,
                                       stdout=logf, stderr=logf)
        try:
            wait_port(port)
            base = f"http://127.0.0.1:{port}"
            opener = urllib.request.build_opener(NoRedirect)
            login = urllib.request.Request(base + "/login", data=f"token={TOKEN}&next=/".encode(),
                                           method="POST")
            try:
                opener.open(login)
                raise SystemExit("login did not redirect")
            except urllib.error.HTTPError as e:
                cookie = e.headers["set-cookie"].split(";")[0]
            out = []
            for label, kind, path in requests_to_time(lambda sql: bench.psql(fleet.db, sql)):
                client = []
                status = None
                for _ in range(repeats):
                    req = urllib.request.Request(base + path)
                    if kind == "page":
                        req.add_header("cookie", cookie)
                    else:
                        req.add_header("authorization", f"Bearer {TOKEN}")
                    t = time.monotonic()
                    try:
                        with urllib.request.urlopen(req, timeout=60) as r:
                            r.read()
                            status = r.status
                    except urllib.error.HTTPError as e:
                        e.read()
                        status = e.code
                    client.append((time.monotonic() - t) * 1000)
                time.sleep(0.2)  # the log line is written
                server = server_times(log_path, urllib.parse.urlsplit(path).path)
                r = {"request": label, "path": path, "status": status,
                     "server_ms_median": round(statistics.median(server[-repeats:]), 1),
                     "server_ms_max": round(max(server[-repeats:]), 1),
                     "client_ms_median": round(statistics.median(client), 1)}
                B.log(f"console {r}")
                out.append(r)
            # Whether stats counted Delivered and Exhausted or estimated them
            # (from the planner's row estimate, at a million rows or more):
            # the overview's time depends on it.
            req = urllib.request.Request(base + "/api/v1/stats")
            req.add_header("authorization", f"Bearer {TOKEN}")
            with urllib.request.urlopen(req, timeout=60) as r:
                estimated = json.load(r)["rows_estimated"]
            return {"rows": ROWS, "attempts": ROWS, "repeats": repeats, "stats_rows_estimated": estimated,
                    "requests": out}
        finally:
            console.terminate()
            console.wait(timeout=60)
    finally:
        fleet.drop()


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def server_times(log_path, path):
    """The ms= of every logged request to `path`, in order."""
    times = []
    with open(log_path) as f:
        for line in f:
            if "console request" in line and f'path="{path}" ' in line:
                m = re.search(r"ms=([0-9.]+)", line)
                if m:
                    times.append(float(m.group(1)))
    if not times:
        raise SystemExit(f"no logged request to {path} (is RUST_LOG debug for hookfleet_console?)")
    return times
