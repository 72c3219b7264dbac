#!/usr/bin/env python3
"""A webhook receiver for the demo, written the way a receiver's developer
would write one, with nothing but Python's standard library: it verifies
X-Frappe-Webhook-Signature and the Standard Webhooks signature of every
request, drops duplicates by webhook-id, and prints a verdict line per request.

usage: demo_receiver.py PORT SECRET
"""
import base64
import hashlib
import hmac
import http.server
import sys
import time

PORT, SECRET = int(sys.argv[1]), sys.argv[2]
TOLERANCE = 300  # seconds, as in the official Standard Webhooks libraries
seen = set()


def frappe_ok(headers, body):
    expected = base64.b64encode(hmac.new(SECRET.encode(), body, hashlib.sha256).digest()).decode()
    return hmac.compare_digest(expected, headers.get("X-Frappe-Webhook-Signature", ""))


def standard_ok(headers, body):
    msg_id, ts = headers.get("webhook-id", ""), headers.get("webhook-timestamp", "0")
    if abs(time.time() - int(ts)) > TOLERANCE:
        return False
    key = base64.b64decode(SECRET[6:]) if SECRET.startswith("whsec_") else SECRET.encode()
    signed = f"{msg_id}.{ts}.".encode() + body
    expected = "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    return any(hmac.compare_digest(expected, s) for s in headers.get("webhook-signature", "").split(" "))


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        msg_id = self.headers.get("webhook-id", "?")
        f, s = frappe_ok(self.headers, body), standard_ok(self.headers, body)
        dup = msg_id in seen
        seen.add(msg_id)
        verdict = "VERIFIED" if f and s else "REJECTED"
        print(f"receiver: {verdict} frappe={'ok' if f else 'BAD'} standard={'ok' if s else 'BAD'}"
              f"{' duplicate' if dup else ''} webhook-id={msg_id} body={body.decode()}", flush=True)
        self.send_response(204 if f and s else 401)
        self.end_headers()

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
