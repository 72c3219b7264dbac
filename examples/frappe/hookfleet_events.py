"""Send a Frappe site's document events to hookfleet's ingest.

Copy this file into your app (your_app/hookfleet_events.py), then in hooks.py:

    doc_events = {
        "*": {
            event: "your_app.hookfleet_events.on_event"
            for event in ("after_insert", "on_update", "on_submit", "on_cancel",
                          "on_trash", "on_update_after_submit", "on_change")
        }
    }

and in site_config.json: "hookfleet_url": "http://127.0.0.1:8480",
"hookfleet_token": "<the ingest's --token>".
"""

import hashlib
import json
import time
import urllib.request

import frappe

# The ingest answers in milliseconds; past this it is down, and the events
# go to a background job that tries again.
TIMEOUT_SECONDS = 10
# The ingest takes at most 1,000 events per batch request.
BATCH_SIZE = 1000
# The background job's waits between tries: about 20 minutes in all, within
# the long queue's 1,500 s job timeout. After the last try the job fails,
# and the events stay in its arguments (RQ Job list) to be run again.
RETRY_WAITS_SECONDS = (10, 60, 300, 900)


def event(doc, method):
    """The hookfleet event for one document event."""
    # The same save reported twice (a retried request) is one event:
    # hookfleet records one delivery per event id and webhook.
    key = "\0".join((doc.doctype, doc.name, method, str(doc.modified)))
    return {
        "entity_type": doc.doctype,
        "event": method,
        "name": doc.name,
        "doc": doc.as_dict(convert_dates_to_str=True),
        "event_id": hashlib.sha256(key.encode()).hexdigest(),
    }


def on_event(doc, method):
    """doc_events hook: collects the event, sent once the transaction commits
    (a rolled-back save sends nothing)."""
    pending = frappe.flags.get("hookfleet_events")
    if pending is None:
        pending = frappe.flags.hookfleet_events = []
        frappe.db.after_commit.add(flush)
        frappe.db.after_rollback.add(discard)
    pending.append(event(doc, method))


def discard():
    frappe.flags.hookfleet_events = None


def flush():
    events = frappe.flags.get("hookfleet_events") or []
    frappe.flags.hookfleet_events = None
    try:
        send(events)
    except Exception:
        frappe.log_error(title="hookfleet: events not sent; a background job tries again")
        frappe.enqueue(send_later, queue="long", events=events)


def send_later(events):
    """The background job: tries again with waits, then fails visibly."""
    for wait in RETRY_WAITS_SECONDS:
        try:
            return send(events)
        except Exception:
            time.sleep(wait)
    send(events)


def send(events):
    """POSTs the events to the ingest; raises unless every batch is recorded."""
    conf = frappe.get_conf()
    url = conf.hookfleet_url.rstrip("/") + "/v1/events/batch"
    for start in range(0, len(events), BATCH_SIZE):
        body = json.dumps(events[start:start + BATCH_SIZE], default=str).encode()
        request = urllib.request.Request(url, data=body, method="POST", headers={
            "Content-Type": "application/json",
            "Authorization": "Bearer " + conf.hookfleet_token,
        })
        # urlopen raises on any answer but 2xx; 202 means recorded.
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:
            if response.status != 202:
                raise RuntimeError(f"hookfleet answered {response.status}")
