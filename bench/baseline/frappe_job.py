"""What a Frappe user runs today: Frappe's webhook background job, reduced to
what it does per event: sign the body, POST it with `requests`, write one
Webhook Request Log row (here with psycopg, one INSERT and a commit), and on
an error log it and give up (the loop's sleeps never trigger against a
receiver that answers 2xx).

Run by RQ workers (bench/baseline/run.py), as Frappe runs it.
"""
import base64
import hashlib
import hmac
import json
import os

import psycopg
import requests

_conn = None


def _db():
    global _conn
    if _conn is None or _conn.closed:
        _conn = psycopg.connect(os.environ["BASELINE_DATABASE_URL"])
    return _conn


def enqueue_webhook(url, body, secret, event_id):
    signature = base64.b64encode(
        hmac.new(secret.encode("utf8"), body.encode("utf8"), hashlib.sha256).digest()
    ).decode()
    headers = {"Content-Type": "application/json", "X-Frappe-Webhook-Signature": signature, "webhook-id": event_id}
    status, error = "Delivered", None
    try:
        r = requests.request("POST", url, data=body, headers=headers, timeout=5)
        r.raise_for_status()
        code = r.status_code
    except Exception as e:  # Frappe logs the error on the row
        status, error, code = "Failed", str(e), None
    conn = _db()
    with conn.cursor() as cur:
        cur.execute(
            "INSERT INTO webhook_request_log (event_id, url, data, headers, response_code, status, error)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (event_id, url, body, json.dumps(headers), code, status, error),
        )
    conn.commit()
