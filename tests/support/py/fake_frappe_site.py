"""Runs examples/frappe/hookfleet_events.py as a Frappe site would, without
Frappe: a stand-in `frappe` module with what the snippet uses (flags, the
after-commit callbacks, the site config, log_error, enqueue).

    fake_frappe_site.py SNIPPET_DIR INGEST_URL TOKEN TRANSACTIONS_JSON

TRANSACTIONS_JSON is a list of transactions, each {"events": [{"method",
"doc"}], "rollback": bool}, run in order in one process, as a worker runs
its requests: a commit runs the after-commit callbacks, a rollback the
after-rollback ones, and either forgets both (as Frappe's database does).
Prints {"errors": [titles logged], "jobs": background jobs enqueued}.
"""

import json
import sys
import types


class _dict(dict):
    """frappe._dict: a dict with attribute access."""

    def __getattr__(self, key):
        return self.get(key)

    def __setattr__(self, key, value):
        self[key] = value


class Callbacks(list):
    def add(self, callback):
        self.append(callback)


class Doc:
    """A document: attributes, and as_dict as Frappe's Document has it."""

    def __init__(self, fields):
        self._fields = fields
        for key, value in fields.items():
            setattr(self, key, value)

    def as_dict(self, convert_dates_to_str=False):
        return dict(self._fields)


def main():
    snippet_dir, url, token, transactions = sys.argv[1:5]
    errors, jobs = [], []
    frappe = types.ModuleType("frappe")
    frappe.flags = _dict()
    frappe.db = types.SimpleNamespace(after_commit=Callbacks(), after_rollback=Callbacks())
    frappe.get_conf = lambda: _dict(hookfleet_url=url, hookfleet_token=token)
    frappe.log_error = lambda title=None, **_: errors.append(title)
    frappe.enqueue = lambda method, queue=None, **kwargs: jobs.append((method, kwargs))
    sys.modules["frappe"] = frappe
    sys.path.insert(0, snippet_dir)
    import hookfleet_events

    for transaction in json.loads(transactions):
        for e in transaction["events"]:
            hookfleet_events.on_event(Doc(e["doc"]), e["method"])
        ending = "after_rollback" if transaction.get("rollback") else "after_commit"
        for callback in getattr(frappe.db, ending):
            callback()
        frappe.db.after_commit.clear()
        frappe.db.after_rollback.clear()
    print(json.dumps({"errors": errors, "jobs": len(jobs)}))


main()
