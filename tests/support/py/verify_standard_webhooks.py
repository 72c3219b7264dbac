"""Verifies one request with the official Standard Webhooks library.

Reads {"secret", "headers", "body"} (and "raw": pass the secret as its
bytes, how a plain non-whsec_ secret must be given) as JSON on stdin;
prints "ok", or "refused: <reason>" and exits 1. The tests use it so that a signature is
judged by the library receivers use, not by code written beside hookfleet's.
"""
import json
import sys

from standardwebhooks.webhooks import Webhook

request = json.load(sys.stdin)
try:
    secret = request["secret"].encode() if request.get("raw") else request["secret"]
    Webhook(secret).verify(request["body"], request["headers"], json_parse=False)
except Exception as e:  # the library raises its own error types
    print(f"refused: {e}")
    sys.exit(1)
print("ok")
