#!/usr/bin/env python3
"""Frappe oracle: run Frappe's REAL webhook code over a corpus of (Webhook, document) cases.

Usage:  oracle.py --frappe /path/to/frappe-checkout --cases DIR --out DIR [--only NAME ...]

The checkout is imported from the path given (nothing is fetched, nothing of Frappe is copied
here). For every case the harness records what Frappe would do: whether the Webhook document
passes the controller's `validate()`, whether the condition holds, whether `run_webhooks`
queues it, and what `enqueue_webhook` would put on the wire (URL, method, headers, body bytes,
X-Frappe-Webhook-Signature).

What runs for real (unstubbed) -- the parts under test:
  * frappe.integrations.doctype.webhook.run_webhooks (condition via frappe.safe_eval with
    get_context(doc), event filtering, queueing) and flush_webhook_execution_queue;
  * frappe.integrations.doctype.webhook.webhook: enqueue_webhook, get_context,
    get_webhook_headers (HMAC-SHA256, base64), get_webhook_data (doc.as_dict(convert_dates_to_str)
    then frappe.render_template + json.loads, or the webhook_data rows), the Webhook controller's
    validate() (validate_docevent, validate_condition, validate_request_url,
    validate_request_body, validate_repeating_fields, validate_secret);
  * frappe.utils.safe_exec (safe_eval with RestrictedPython, get_safe_globals, NFKC
    normalisation), frappe.utils.jinja (get_jenv: FrappeSandboxedEnvironment with
    DebugUndefined, set_filters, the jinja hooks of frappe/hooks.py, render_template,
    validate_template), frappe.utils.data (all `utils.*`), frappe.model.document.Document /
    BaseDocument (get, as_dict, get_valid_dict, child tables), frappe.model.meta.Meta (built by
    its own load_from_db from the rows the in-memory database below serves), frappe.new_doc;
  * requests: the request that enqueue_webhook makes is prepared by requests' own
    Session.prepare_request (URL normalisation, default headers, header validation, the body
    as it would be encoded by http.client), only the socket send is replaced.

STUBS (everything that needs a site; each is the smallest stand-in that lets the real code run):
  1. frappe.local.db  -> MiniDB, an in-memory database. Why: no MariaDB. It serves
     - DocType / DocField / DocPerm rows: Frappe's own doctypes (Webhook, Webhook Data,
       Webhook Header, System Settings, User, ToDo, ...) are read from the checkout's doctype
       JSON files, exactly as `bench migrate` would have synced them; the doctype of a case's
       document (Sales Order, ...: ERPNext is not installed) is inferred from the case's doc,
       see below, and marked custom so its controller is the plain Document class;
     - the System Settings single (SITE_SETTINGS below) and Currency rows built from the
       checkout's frappe/geo/country_info.json as Frappe's installer builds them;
     - the saved Webhook row and its child rows, so enqueue_webhook's frappe.get_doc("Webhook",
       name) loads it like from the database (webhook_secret stored masked, as Frappe stores
       passwords);
     - get_default (site defaults from SITE_SETTINGS), get_global("installed_apps") ->
       ["frappe"], table_exists -> False (so Meta skips Custom Field / Property Setter: no
       customisations), the SELECTs Meta makes for custom DocType Links/Actions/States and
       Custom DocPerm -> no rows, estimate_count -> 0, after_commit / before_commit callback
       lists. Any other query raises MiniDBUnsupported, so an unexpected database read shows
       as an error instead of a silent guess.
     The site's defaults (tabDefaultValue), the user's roles (Administrator: all) and User
     Permissions (none) are put straight into the stub cache where Frappe caches them.
  2. frappe.cache -> StubCache, a dict. Why: no Redis. Same get_value/set_value/hget/hset
     semantics (generator called on miss); cleared between cases.
  3. frappe.utils.password.get_decrypted_password -> reads an in-memory __Auth map. Why: the
     real one queries the __Auth table and decrypts with the site's encryption key; the stored
     secret is the plain text the Webhook was saved with, and the "Password not found" error
     is raised exactly as the real one raises it.
  4. frappe.local.session -> a frappe._dict with user=SESSION_USER ("Administrator" unless a
     case sets "session_user"), data.full_name, data.csrf_token; the user's roles are put in
     the (stub) cache. Why: frappe.set_user and get_roles need the User / Has Role tables. A
     webhook job runs as the user who saved the document.
  5. frappe.enqueue -> runs the job at once, after a pickle round trip of its kwargs (what RQ
     does to the document). Why: no Redis/RQ worker.
  6. requests.request (only the send) -> prepares the request with requests' own
     Session.prepare_request and records it, answering 200. Why: no network; the bytes are
     what requests would hand to http.client (a str body is encoded ISO-8859-1 by http.client;
     Frappe's body is json.dumps(..., default=str), which is ASCII).
  7. webhook.log_request -> records the exception being handled instead of inserting a
     Webhook Request Log. webhook.sleep (between retries) -> no-op.
  8. Time: freezegun freezes the clock at 2026-12-01 10:00:00 UTC and the site time zone is
     UTC, so nowdate()/now()/today() give 2026-12-01 / 2026-12-01 10:00:00.
  9. A throw-away bench directory (sites/apps.txt = frappe, one site with db_type mariadb,
     logs/) so that frappe.init and frappe.logger run unmodified; the harness chdirs into it.

How faithful the document is: the case's `doc` is turned into a real
frappe.model.document.Document with `frappe.get_doc(doc)`, the in-memory state a save hands
to run_webhooks (child rows are Document objects with parent/parenttype/parentfield/idx set,
docstatus a DocStatus, every field of the meta present, `__islocal` cleared as db_insert
clears it). Its DocType meta is inferred: a field named in ERPNEXT_FIELDTYPES gets ERPNext's
type (qty is Float, grand_total Currency, is_return Check, ...), otherwise the JSON value
decides (float -> Float, int -> Int, bool -> Check, YYYY-MM-DD -> Date, datetime string ->
Datetime, list -> Table, anything else -> Data), and only the few defaults in ERPNEXT_DEFAULTS
are known (they matter to validate_condition, which runs on frappe.new_doc); a case may override with
"fieldtypes": {"Doctype": {"field": "Type"}}. So as_dict() coerces exactly as Frappe would for
those types (a Float given as 2 becomes 2.0 in the body; a Check becomes 0/1), but a real
ERPNext document has many more (None) fields than the case lists, which only shows when a
template dumps a whole document or row. The save's own sanitising (_sanitize_content of HTML
in Data fields) is not run. Frappe doctypes (User, ToDo, Note, Contact, ...) use their real meta.
"""

from __future__ import annotations

import argparse
import collections
import copy
import glob
import json
import os
import pickle
import re
import sys
import tempfile
import traceback

RECEIVER_BASE = "http://127.0.0.1:9/hook"
FROZEN_NOW = "2026-12-01 10:00:00"
SESSION_USER = "Administrator"
SESSION_FULL_NAME = "Administrator"

# The site: what System Settings holds (a v15 setup-wizard site: Banker's Rounding, float
# precision 3), with the date/number formats left at Frappe's own fallbacks.
SITE_SETTINGS = {
    "time_zone": "UTC",
    "date_format": "yyyy-mm-dd",
    "time_format": "HH:mm:ss",
    "number_format": "#,###.##",
    "float_precision": "3",
    "currency_precision": "",
    "rounding_method": "Banker's Rounding",
    "first_day_of_the_week": "Sunday",
    "language": "en",
    "country": None,
    "currency": None,
}

SUBMITTABLE = {
    "Sales Order", "Sales Invoice", "Purchase Order", "Purchase Invoice", "Payment Entry",
    "Stock Entry", "Delivery Note", "Purchase Receipt", "Journal Entry", "Material Request",
    "Quotation", "Supplier Quotation", "Salary Slip", "Expense Claim", "Leave Application",
}

CHILD_DOCTYPES = {
    ("Sales Order", "items"): "Sales Order Item",
    ("Sales Order", "taxes"): "Sales Taxes and Charges",
    ("Sales Order", "payment_schedule"): "Payment Schedule",
    ("Sales Order", "sales_team"): "Sales Team",
    ("Sales Invoice", "items"): "Sales Invoice Item",
    ("Sales Invoice", "taxes"): "Sales Taxes and Charges",
    ("Sales Invoice", "payment_schedule"): "Payment Schedule",
    ("Sales Invoice", "payments"): "Sales Invoice Payment",
    ("Quotation", "items"): "Quotation Item",
    ("Delivery Note", "items"): "Delivery Note Item",
    ("Purchase Order", "items"): "Purchase Order Item",
    ("Purchase Order", "taxes"): "Purchase Taxes and Charges",
    ("Purchase Order", "payment_schedule"): "Payment Schedule",
    ("Purchase Invoice", "items"): "Purchase Invoice Item",
    ("Payment Entry", "references"): "Payment Entry Reference",
    ("Payment Entry", "deductions"): "Payment Entry Deduction",
    ("Stock Entry", "items"): "Stock Entry Detail",
    ("Customer", "credit_limits"): "Customer Credit Limit",
    ("Customer", "accounts"): "Party Account",
    ("Item", "barcodes"): "Item Barcode",
    ("Item", "item_defaults"): "Item Default",
    ("Item", "uoms"): "UOM Conversion Detail",
    ("Material Request", "items"): "Material Request Item",
    ("Journal Entry", "accounts"): "Journal Entry Account",
}

# ERPNext field types for fields the corpus uses (from ERPNext's doctype definitions).
_CURRENCY = """grand_total base_grand_total total base_total net_total base_net_total rounded_total
base_rounded_total rounding_adjustment discount_amount base_discount_amount total_taxes_and_charges
outstanding_amount paid_amount base_paid_amount received_amount base_received_amount rate base_rate
amount base_amount net_rate net_amount price_list_rate tax_amount base_tax_amount
tax_amount_after_discount_amount credit_limit payment_amount base_payment_amount standard_rate
valuation_rate basic_rate basic_amount additional_cost total_outgoing_value total_incoming_value
value_difference total_amount allocated_amount unallocated_amount difference_amount
write_off_amount change_amount advance_paid total_advance opening_balance last_purchase_rate
debit credit debit_in_account_currency credit_in_account_currency total_debit total_credit
outstanding base_outstanding total_allocated_amount""".split()
_FLOAT = """qty stock_qty conversion_factor transfer_qty total_qty actual_qty projected_qty
delivered_qty billed_qty received_qty ordered_qty conversion_rate plc_conversion_rate
source_exchange_rate target_exchange_rate exchange_rate opening_stock weight_per_unit
total_net_weight min_order_qty safety_stock additional_discount_percentage""".split()
_PERCENT = """per_billed per_delivered per_received per_ordered invoice_portion discount_percentage
margin_rate_or_amount commission_rate allocated_percentage""".split()
_INT = """lead_time_days credit_days""".split()
_CHECK = """is_return is_pos disabled is_stock_item is_fixed_asset has_batch_no has_serial_no
is_frozen is_internal_customer is_opening update_stock is_subcontracted enabled
included_in_print_rate bypass_credit_limit_check is_group is_sales_item is_purchase_item
ignore_pricing_rule is_default""".split()
_DATE = """transaction_date delivery_date posting_date due_date schedule_date bill_date
reference_date clearance_date valid_till expected_delivery_date from_date to_date
end_of_life""".split()
_DATETIME = """creation modified""".split()
_TIME = """posting_time""".split()
ERPNEXT_FIELDTYPES = {
    **{f: "Currency" for f in _CURRENCY},
    **{f: "Float" for f in _FLOAT},
    **{f: "Percent" for f in _PERCENT},
    **{f: "Int" for f in _INT},
    **{f: "Check" for f in _CHECK},
    **{f: "Date" for f in _DATE},
    **{f: "Datetime" for f in _DATETIME},
    **{f: "Time" for f in _TIME},
}

# Defaults of ERPNext fields the corpus uses (what frappe.new_doc -- and so the Webhook's
# validate_condition -- puts in a new document); every other field starts empty.
ERPNEXT_DEFAULTS = {
    ("Sales Order", "status"): "Draft",
    ("Sales Order", "order_type"): "Sales",
    ("Sales Invoice", "status"): "Draft",
    ("Purchase Order", "status"): "Draft",
    ("Payment Entry", "status"): "Draft",
    ("Customer", "customer_type"): "Company",
    ("Item", "is_stock_item"): "1",
}

DEFAULT_FIELDS = ("doctype", "name", "owner", "creation", "modified", "modified_by", "docstatus", "idx")
CHILD_TABLE_FIELDS = ("parent", "parentfield", "parenttype")
DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
DATETIME_RE = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d+)?$")


class MiniDBUnsupported(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# set-up


def setup_frappe(frappe_path: str):
    sys.path.insert(0, os.path.abspath(frappe_path))
    import frappe

    bench = tempfile.mkdtemp(prefix="frappe-oracle-bench-")
    sites = os.path.join(bench, "sites")
    os.makedirs(os.path.join(bench, "logs"))
    os.makedirs(sites)
    with open(os.path.join(sites, "apps.txt"), "w") as f:
        f.write("frappe\n")
    with open(os.path.join(sites, "common_site_config.json"), "w") as f:
        json.dump({}, f)
    site = "oracle.localhost"
    os.makedirs(os.path.join(sites, site, "logs"), exist_ok=True)
    with open(os.path.join(sites, site, "site_config.json"), "w") as f:
        json.dump({"db_type": "mariadb", "db_name": "oracle", "db_password": "unused"}, f)

    frappe.cache = StubCache()  # stub 2 (set before init so no Redis wrapper is built)
    os.chdir(sites)  # Frappe runs from the bench's sites directory (its logger writes ../logs)
    frappe.init(site, sites_path=sites)
    frappe.local.db = MiniDB(frappe, frappe_path)  # stub 1
    return frappe


class StubCache:
    """Stub 2: RedisWrapper's interface over a dict."""

    def __init__(self):
        self.store = {}

    def clear(self):
        self.store.clear()

    def get_value(self, key, generator=None, user=None, expires=False, shared=False):
        if key in self.store:
            return self.store[key]
        if generator:
            val = generator()
            self.store[key] = val
            return val
        return None

    def set_value(self, key, val, user=None, expires_in_sec=None, shared=False):
        self.store[key] = val

    def delete_value(self, keys, user=None, make_keys=True, shared=False):
        if isinstance(keys, str):
            keys = [keys]
        for k in keys:
            self.store.pop(k, None)

    delete_key = delete_value

    def delete_keys(self, key):
        for k in [k for k in self.store if isinstance(k, str) and k.startswith(key)]:
            del self.store[k]

    def hget(self, name, key, generator=None, shared=False):
        h = self.store.setdefault(("h", name), {})
        if key in h:
            return h[key]
        if generator:
            h[key] = generator()
            return h[key]
        return None

    def hset(self, name, key, value, shared=False, *args, **kwargs):
        self.store.setdefault(("h", name), {})[key] = value

    def hdel(self, name, key, shared=False):
        self.store.setdefault(("h", name), {}).pop(key, None)

    def hgetall(self, name):
        return dict(self.store.get(("h", name), {}))

    def exists(self, *names, user=None, shared=None):
        return sum(1 for n in names if n in self.store)

    def get_keys(self, key):
        return [k for k in self.store if isinstance(k, str) and k.startswith(key)]

    def __getattr__(self, item):
        raise MiniDBUnsupported(f"cache.{item} is not stubbed")


class _Callbacks(list):
    def add(self, fn):
        self.append(fn)

    def run(self):
        pass

    def reset(self):
        self.clear()


class MiniDB:
    """Stub 1: the database, in memory (see the module docstring)."""

    db_type = "mariadb"

    def __init__(self, frappe, frappe_path):
        self.frappe = frappe
        self.after_commit = _Callbacks()
        self.before_commit = _Callbacks()
        self.after_rollback = _Callbacks()
        self.before_rollback = _Callbacks()
        self.value_cache = {}
        self.doctype_files = {}
        for path in glob.glob(os.path.join(frappe_path, "frappe", "**", "doctype", "*", "*.json"), recursive=True):
            folder = os.path.basename(os.path.dirname(path))
            if os.path.basename(path) == folder + ".json":
                self.doctype_files[folder] = path
        self.reset()

    def reset(self):
        self.doctypes = {}  # name -> doctype dict (with fields etc.)
        self.rows = {}  # doctype -> list of row dicts
        self.singles = {"System Settings": dict(SITE_SETTINGS, name="System Settings", doctype="System Settings")}
        self.after_commit.clear()
        self._load_currencies()

    # -- doctypes
    def _doctype_def(self, name):
        if name in self.doctypes:
            return self.doctypes[name]
        scrubbed = name.replace(" ", "_").replace("-", "_").lower()
        path = self.doctype_files.get(scrubbed)
        if not path:
            return None
        with open(path) as f:
            d = json.load(f)
        if d.get("doctype") != "DocType" or d.get("name") != name:
            return None
        self.doctypes[name] = d
        return d

    def register_doctype(self, d):
        self.doctypes[d["name"]] = d

    def _doctype_row(self, name):
        d = self._doctype_def(name)
        if d is None:
            return None
        # a tabDocType row has every column of DocType (NULL where the JSON omits it)
        row = {c: None for c in self.get_table_columns("DocType")}
        row.update({k: v for k, v in d.items() if not isinstance(v, list)})
        row.setdefault("custom", 0)
        row.setdefault("istable", 0)
        row.setdefault("issingle", 0)
        row.setdefault("is_submittable", 0)
        row.setdefault("is_virtual", 0)
        row.setdefault("is_tree", 0)
        row["doctype"] = "DocType"
        row["name"] = name
        return row

    def _child_rows_of_doctype(self, table, parent):
        d = self._doctype_def(parent)
        if d is None:
            return []
        key = {"DocField": "fields", "DocPerm": "permissions", "DocType Action": "actions",
               "DocType Link": "links", "DocType State": "states"}[table]
        out = []
        for i, r in enumerate(d.get(key, []) or []):
            r = dict(r)
            r.update(doctype=table, parent=parent, parenttype="DocType", parentfield=key, idx=i + 1)
            r.setdefault("name", f"{parent}-{key}-{i}")
            out.append(r)
        return out

    def get_table_columns(self, doctype):
        d = self._doctype_def(doctype)
        if d is None:
            raise self.frappe.db.TableMissingError if hasattr(self.frappe.db, "TableMissingError") else MiniDBUnsupported(doctype)
        from frappe.model import data_fieldtypes

        cols = ["name", "creation", "modified", "modified_by", "owner", "docstatus", "idx"]
        cols += [f["fieldname"] for f in d.get("fields", []) if f.get("fieldtype") in data_fieldtypes]
        if d.get("istable") or doctype in ("DocField", "DocPerm", "DocType Action", "DocType Link", "DocType State"):
            cols += list(CHILD_TABLE_FIELDS)
        return cols

    # -- currencies (what frappe.utils.install / setup creates from country_info.json)
    def _load_currencies(self):
        from frappe.geo.country_info import get_all

        rows = {}
        for _country, info in get_all().items():
            cur = info.get("currency")
            if not cur or cur in rows:
                continue
            rows[cur] = {
                "doctype": "Currency", "name": cur, "currency_name": cur,
                "fraction": info.get("currency_fraction"),
                "symbol": info.get("currency_symbol"),
                "fraction_units": info.get("currency_fraction_units"),
                "smallest_currency_fraction_value": info.get("smallest_currency_fraction_value"),
                "number_format": info.get("number_format"),
                "symbol_on_right": 0, "enabled": 1,
            }
        self.rows["Currency"] = list(rows.values())

    # -- generic row access
    def _match(self, row, filters):
        if filters is None:
            return True
        if isinstance(filters, str):
            return row.get("name") == filters
        if isinstance(filters, dict):
            for k, v in filters.items():
                if isinstance(v, (list, tuple)):
                    op, val = v[0], v[1]
                    if op == "=" and row.get(k) != val:
                        return False
                    if op in ("in",) and row.get(k) not in val:
                        return False
                    if op not in ("=", "in"):
                        raise MiniDBUnsupported(f"filter operator {op}")
                elif row.get(k) != v:
                    return False
            return True
        raise MiniDBUnsupported(f"filters {filters!r}")

    def _rows(self, doctype, filters):
        if doctype == "DocType":
            name = filters if isinstance(filters, str) else (filters or {}).get("name")
            row = self._doctype_row(name) if name else None
            return [row] if row else []
        if doctype in ("DocField", "DocPerm", "DocType Action", "DocType Link", "DocType State"):
            if isinstance(filters, dict) and "parent" in filters:
                return [r for r in self._child_rows_of_doctype(doctype, filters["parent"]) if self._match(r, filters)]
            return []
        if doctype in self.singles:
            return [self.singles[doctype]]
        return [r for r in self.rows.get(doctype, []) if self._match(r, filters)]

    def _project(self, row, fieldname, as_dict):
        fd = self.frappe._dict
        if fieldname == "*":
            return fd(row)  # Database.get_value turns as_dict on for "*"
        if isinstance(fieldname, str):
            if as_dict:
                return fd({fieldname: row.get(fieldname)})
            return row.get(fieldname)
        if as_dict:
            return fd({f: row.get(f) for f in fieldname})
        return tuple(row.get(f) for f in fieldname)

    def get_value(self, doctype, filters=None, fieldname="name", ignore=None, as_dict=False, *args, **kwargs):
        if doctype in self.singles and (filters is None or filters == doctype):
            row = self.singles[doctype]
        else:
            rows = self._rows(doctype, filters)
            if not rows:
                return None
            row = rows[0]
        return self._project(row, fieldname, as_dict)

    def get_values(self, doctype, filters=None, fieldname="name", ignore=None, as_dict=False, *args, **kwargs):
        rows = self._rows(doctype, filters)
        if kwargs.get("order_by") == "idx asc":
            rows = sorted(rows, key=lambda r: r.get("idx") or 0)
        return [self._project(r, fieldname, as_dict) for r in rows]

    def get_singles_dict(self, doctype, debug=False, *, for_update=False, cast=False):
        return self.frappe._dict(self.singles.get(doctype, {}))

    def get_single_value(self, doctype, fieldname, cache=True):
        return self.singles.get(doctype, {}).get(fieldname)

    def get_default(self, key, parent="__default"):
        v = SITE_SETTINGS.get(key)
        return v if v not in ("",) else None

    def get_defaults(self, key=None, parent="__default"):
        if key:
            return self.get_default(key)
        return self.frappe._dict({k: v for k, v in SITE_SETTINGS.items() if v not in (None, "")})

    def get_global(self, key, user="__global"):
        if key == "installed_apps":
            return '["frappe"]'
        return None

    def table_exists(self, doctype, cached=True):
        return False

    def has_column(self, doctype, column):
        return doctype == "DocType" and column == "is_virtual"

    def estimate_count(self, doctype):
        return 0

    def exists(self, doctype, name=None, cache=False):
        if isinstance(doctype, dict):
            raise MiniDBUnsupported("exists(dict)")
        rows = self._rows(doctype, name)
        return rows[0].get("name") if rows else None

    def count(self, *a, **k):
        raise MiniDBUnsupported("count")

    def escape(self, s, percent=True):
        return "'" + str(s).replace("\\", "\\\\").replace("'", "\\'") + "'"

    NO_CUSTOMISATION_TABLES = re.compile(
        r"from `tab(Custom DocPerm|DocType Link|DocType Action|DocType State|Custom Field|Property Setter)`"
    )

    def sql(self, query, *a, **k):
        # the site has no customisations: Meta.process's reads of custom links/actions/states
        # and Custom DocPerm find nothing
        if isinstance(query, str) and self.NO_CUSTOMISATION_TABLES.search(query):
            return []
        raise MiniDBUnsupported(f"sql: {query!r}")

    def set_value(self, *a, **k):
        raise MiniDBUnsupported("set_value")

    def commit(self):
        pass

    def rollback(self, *, save_point=None, chain=False):
        pass

    def add_index(self, *a, **k):
        raise MiniDBUnsupported("add_index")

    def __getattr__(self, item):
        raise MiniDBUnsupported(f"db.{item}")

    def __bool__(self):
        return True


# ---------------------------------------------------------------------------------------------
# meta inference for the case's document


def infer_fieldtype(fieldname, values, overrides):
    if fieldname in overrides:
        return overrides[fieldname]
    if fieldname in ERPNEXT_FIELDTYPES:
        return ERPNEXT_FIELDTYPES[fieldname]
    vals = [v for v in values if v is not None]
    if not vals:
        return "Data"
    if all(isinstance(v, list) for v in vals):
        return "Table"
    if all(isinstance(v, bool) for v in vals):
        return "Check"
    if all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
        return "Int"
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
        return "Float"
    if all(isinstance(v, str) and DATE_RE.match(v) for v in vals):
        return "Date"
    if all(isinstance(v, str) and DATETIME_RE.match(v) for v in vals):
        return "Datetime"
    if all(isinstance(v, dict) for v in vals):
        return "JSON"
    return "Data"


def register_case_doctypes(db, doc: dict, fieldtypes: dict):
    """Register an inferred DocType for the case's doc (and its child tables) unless Frappe
    itself defines that doctype."""

    def build(doctype, samples, istable):
        if db._doctype_def(doctype) is not None and doctype not in db.doctypes_inferred:
            return
        overrides = fieldtypes.get(doctype, {})
        names = []
        for s in samples:
            for k in s:
                if k not in names and k not in DEFAULT_FIELDS and k not in CHILD_TABLE_FIELDS and not k.startswith("_"):
                    names.append(k)
        fields = []
        for fn in names:
            vals = [s.get(fn) for s in samples if fn in s]
            ft = infer_fieldtype(fn, vals, overrides)
            f = {"fieldname": fn, "fieldtype": ft, "label": fn.replace("_", " ").title()}
            if (doctype, fn) in ERPNEXT_DEFAULTS:
                f["default"] = ERPNEXT_DEFAULTS[(doctype, fn)]
            if ft in ("Table", "Table MultiSelect"):
                child = CHILD_DOCTYPES.get((doctype, fn), f"{doctype} {fn.replace('_', ' ').title()}")
                f["options"] = child
                rows = [r for v in vals if isinstance(v, list) for r in v if isinstance(r, dict)]
                build(child, rows, True)
            fields.append(f)
        d = {
            "doctype": "DocType", "name": doctype, "module": "Custom", "custom": 1,
            "istable": 1 if istable else 0, "issingle": 0,
            "is_submittable": 1 if doctype in SUBMITTABLE else 0,
            "autoname": "hash", "fields": fields, "permissions": [],
        }
        db.register_doctype(d)
        db.doctypes_inferred.add(doctype)

    build(doc["doctype"], [doc], False)


# ---------------------------------------------------------------------------------------------
# per-case run


def err_info(e, frappe=None):
    if e is None:
        return None
    msg = str(e)
    out = {"class": type(e).__name__}
    if "<pre>" in msg:
        # frappe.render_template's throw: the message embeds the template and a traceback with
        # local paths; keep only its title.
        out["message"] = "Jinja Template Error"
    else:
        out["message"] = msg
    cause = e.__cause__ or e.__context__
    if cause is not None and cause is not e:
        out["cause"] = {"class": type(cause).__name__, "message": str(cause)}
    return out


class Recorder:
    def __init__(self):
        self.requests = []  # prepared requests (one per try)
        self.logs = []  # log_request calls
        self.enqueued = []


def install_patches(frappe, rec: Recorder):
    import requests

    import frappe.integrations.doctype.webhook.webhook as wmod
    import frappe.utils.password as pwmod

    def fake_request(method, url, **kwargs):
        s = requests.Session()
        req = requests.Request(method=method.upper() if isinstance(method, str) else method, url=url,
                               data=kwargs.get("data"), headers=kwargs.get("headers"),
                               json=kwargs.get("json"), params=kwargs.get("params"))
        prep = s.prepare_request(req)  # raises as requests.request would (bad URL, bad header)
        body = prep.body
        if isinstance(body, str):
            body = body.encode("iso-8859-1")  # what http.client does with a str body
        rec.requests.append({
            "method": prep.method, "url": prep.url, "headers": list(prep.headers.items()),
            "body": body, "timeout": kwargs.get("timeout"),
        })
        r = requests.Response()
        r.status_code = 200
        r._content = b"{}"
        r.url = prep.url
        r.request = prep
        return r

    requests.request = fake_request  # stub 6
    wmod.requests.request = fake_request

    def fake_log_request(webhook, docname, url, headers, data, res=None):  # stub 7
        exc = sys.exc_info()[1]
        rec.logs.append({"url": url, "headers": headers, "data": data, "res": res, "exc": exc})

    wmod.log_request = fake_log_request
    wmod.sleep = lambda s: None

    def fake_get_decrypted_password(doctype, name, fieldname="password", raise_exception=True):  # stub 3
        v = AUTH.get((doctype, name, fieldname))
        if v:
            return v
        if raise_exception:
            frappe.throw(
                frappe._("Password not found for {0} {1} {2}").format(doctype, name, fieldname),
                frappe.AuthenticationError,
            )

    pwmod.get_decrypted_password = fake_get_decrypted_password

    def fake_enqueue(method, queue="default", timeout=None, event=None, is_async=True, job_name=None,
                     now=False, enqueue_after_commit=False, *, on_success=None, on_failure=None,
                     at_front=False, job_id=None, deduplicate=False, **kwargs):  # stub 5
        rec.enqueued.append({"method": method, "queue": queue})
        kwargs = pickle.loads(pickle.dumps(kwargs))
        return frappe.get_attr(method)(**kwargs)

    frappe.enqueue = fake_enqueue


AUTH: dict = {}


def reset_site(frappe, session_user):
    frappe.cache.clear()
    db = frappe.local.db
    db.reset()
    db.doctypes_inferred = set()
    AUTH.clear()
    frappe.local.valid_columns = {}
    frappe.local.new_doc_templates = {}
    frappe.local.jenv = None
    frappe.local.message_log = []
    frappe.local.flags.currently_saving = []
    for attr in ("system_settings", "user_date_format", "user_time_format", "_webhook_queue"):
        if hasattr(frappe.local, attr):
            delattr(frappe.local, attr)
    frappe.local.session = frappe._dict(  # stub 4
        user=session_user, sid="oracle-sid",
        data=frappe._dict(user=session_user, full_name=SESSION_FULL_NAME if session_user == "Administrator" else session_user,
                          csrf_token="oracle-csrf-token"),
    )
    frappe.local.user = session_user
    # tabDefaultValue: the site's defaults (what System Settings writes there); no user defaults
    frappe.cache.hset("defaults", "__default", frappe._dict({k: v for k, v in SITE_SETTINGS.items() if v not in (None, "")}))
    frappe.cache.hset("defaults", session_user, frappe._dict())
    # no User Permission records
    frappe.cache.hset("user_permissions", session_user, {})
    # roles come from the Has Role table: the Administrator has every role, others "All"
    frappe.cache.hset("roles", session_user,
                      ["Administrator", "System Manager", "All", "Guest"] if session_user == "Administrator" else ["All", "Guest"])
    frappe.local.lang = "en"
    frappe.local.form_dict = frappe._dict()
    frappe.local.request_cache = collections.defaultdict(dict)
    if hasattr(frappe.local, "site_cache"):
        frappe.local.site_cache = {}


def store_webhook(frappe, w):
    """Save the webhook as the database would hold it (password masked, secret in __Auth)."""
    db = frappe.local.db
    d = dict(w.get_valid_dict(sanitize=False, ignore_virtual=True))
    d["doctype"] = "Webhook"
    children = {}
    for df in w.meta.get_table_fields():
        rows = [dict(c.get_valid_dict(sanitize=False, ignore_virtual=True)) for c in (w.get(df.fieldname) or [])]
        children[df.fieldname] = (df.options, rows)
    secret = d.get("webhook_secret")
    if secret and not w.is_dummy_password(secret):
        AUTH[("Webhook", w.name, "webhook_secret")] = secret
        d["webhook_secret"] = "*" * len(secret)
    db.rows["Webhook"] = [dict(d)]
    for fieldname, (child_dt, rows) in children.items():
        for i, r in enumerate(rows):
            r = dict(r)
            r.update(parent=w.name, parenttype="Webhook", parentfield=fieldname, idx=i + 1)
            r.setdefault("name", f"{w.name}-{fieldname}-{i + 1}")
            db.rows.setdefault(child_dt, []).append(r)


def jsonable(v):
    """Make a value JSON-serialisable for the expectation file (no information lost for the
    JSON values a webhook can produce)."""
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if v is None or isinstance(v, (str, bool, float)):
        return v
    if isinstance(v, int):
        return int(v)
    return {"__repr__": repr(v)}


def run_case(frappe, case: dict) -> dict:
    import frappe.integrations.doctype.webhook as whpkg
    import frappe.integrations.doctype.webhook.webhook as wmod

    session_user = case.get("session_user", SESSION_USER)
    reset_site(frappe, session_user)
    db = frappe.local.db
    rec = Recorder()
    install_patches(frappe, rec)

    wh_in = copy.deepcopy(case["webhook"])
    doc_in = copy.deepcopy(case["doc"])
    wh_in["doctype"] = "Webhook"
    if isinstance(wh_in.get("request_url"), str):
        wh_in["request_url"] = wh_in["request_url"].replace("RECEIVER", RECEIVER_BASE)
    wh_in.setdefault("name", "oracle-webhook")

    register_case_doctypes(db, doc_in, case.get("fieldtypes", {}))
    if wh_in.get("webhook_doctype") and wh_in["webhook_doctype"] != doc_in["doctype"]:
        register_case_doctypes(db, {"doctype": wh_in["webhook_doctype"]}, {})

    out: dict = {"case": case.get("_name"), "class": case.get("class"), "receiver_base": RECEIVER_BASE}

    # ---- validation: the Webhook controller's validate()
    validated = None
    try:
        w = frappe.get_doc(copy.deepcopy(wh_in))
        w.validate()
        validated = w
        out["validation"] = {"accepted": True}
    except Exception as e:  # noqa: BLE001
        out["validation"] = {"accepted": False, "error": err_info(e)}
    frappe.local.message_log = []
    # the standard insert checks (mandatory fields, Select options) that save runs too
    try:
        w2 = frappe.get_doc(copy.deepcopy(wh_in))
        w2._validate_mandatory()
        w2._validate_selects()
        out["validation"]["insert_checks"] = {"accepted": True}
    except Exception as e:  # noqa: BLE001
        out["validation"]["insert_checks"] = {"accepted": False, "error": err_info(e)}
    frappe.local.message_log = []

    # the webhook as stored: validated (validate() clears webhook_json for Form URL-Encoded and
    # webhook_data for JSON), or -- when Frappe refuses it -- as given, to show what it would do
    w = validated if validated is not None else frappe.get_doc(copy.deepcopy(wh_in))
    store_webhook(frappe, w)
    out["enabled"] = bool(frappe.utils.cint(w.enabled)) if w.get("enabled") is not None else True

    # ---- the document as a save hands it to run_webhooks
    doc = frappe.get_doc(copy.deepcopy(doc_in))
    for child in doc.get_all_children():
        if child.__dict__.get("__islocal"):
            child.__dict__["__islocal"] = False
    doc.flags.in_insert = w.webhook_docevent == "after_insert"

    # ---- condition, exactly as run_webhooks evaluates it
    cond = w.condition
    if not cond:
        out["meets_condition"] = True
    else:
        try:
            res = frappe.safe_eval(cond, eval_locals=wmod.get_context(doc))
            out["meets_condition"] = bool(res)
            out["condition_value"] = jsonable(res) if isinstance(res, (bool, int, float, str, type(None))) else {"__repr__": repr(res)}
        except Exception as e:  # noqa: BLE001
            out["meets_condition"] = {"error": err_info(e)}

    # ---- run_webhooks itself (event filter, enabled filter, queue); a raising condition makes
    # the document's save fail
    frappe.cache.set_value("webhooks", None)
    frappe.cache.delete_value("webhooks")
    webhooks = {}
    if out["enabled"]:
        webhooks.setdefault(w.webhook_doctype, []).append(frappe._dict(
            name=w.name, condition=w.condition, webhook_docevent=w.webhook_docevent,
            webhook_doctype=w.webhook_doctype, background_jobs_queue=w.background_jobs_queue))
    frappe.cache.set_value("webhooks", webhooks)
    try:
        whpkg.run_webhooks(doc, w.webhook_docevent)
        queued = getattr(frappe.local, "_webhook_queue", None) or []
        out["fires"] = bool(queued)
    except Exception as e:  # noqa: BLE001
        out["fires"] = False
        out["fires_error"] = err_info(e)
    if hasattr(frappe.local, "_webhook_queue"):
        del frappe.local._webhook_queue
    frappe.local.message_log = []

    # ---- what enqueue_webhook sends (computed whatever the condition, like a preview); the
    # document goes through the pickle round trip RQ gives it
    rec.requests.clear()
    rec.logs.clear()
    job_doc = pickle.loads(pickle.dumps(doc))
    wmod.enqueue_webhook(job_doc, frappe._dict(name=w.name))
    frappe.local.message_log = []

    sent = rec.requests[0] if rec.requests else None
    out["sends"] = sent is not None
    if sent is None:
        log = rec.logs[0] if rec.logs else {}
        exc = log.get("exc")
        stage = "url" if log.get("url") is None and w.is_dynamic_url else ("headers" if log.get("headers") is None else "data")
        if rec.logs and log.get("headers") is not None and log.get("data") is not None:
            stage = "request"
        out["error"] = dict(err_info(exc) or {"class": None, "message": None}, stage=stage)
        out["tries"] = len(rec.logs)
    else:
        body = sent["body"] or b""
        wire_headers = [(k, v.decode("latin-1") if isinstance(v, bytes) else v) for k, v in sent["headers"]]
        hdict = {k: v for k, v in wire_headers}
        own = {}
        for h in w.webhook_headers or []:
            if h.get("key") and h.get("value"):
                own[h.get("key")] = h.get("value")
        out["method"] = sent["method"]
        out["url"] = rec.logs[0]["url"] if rec.logs else None
        out["wire_url"] = sent["url"]
        out["headers"] = own
        out["wire_headers"] = wire_headers
        out["content_type"] = hdict.get("Content-Type")
        out["signature"] = hdict.get(wmod.WEBHOOK_SECRET_HEADER)
        out["body_bytes"] = body.decode("utf-8")
        out["body_json"] = jsonable(json.loads(body)) if body else None
        out["timeout"] = sent["timeout"]
    out["delivered"] = bool(out["fires"] and out["sends"])
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--frappe", required=True, help="path of the Frappe checkout (the directory holding frappe/)")
    ap.add_argument("--cases", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args(argv)

    from freezegun import freeze_time

    args.cases = os.path.abspath(args.cases)
    args.out = os.path.abspath(args.out)
    frappe = setup_frappe(args.frappe)
    os.makedirs(args.out, exist_ok=True)
    files = sorted(glob.glob(os.path.join(args.cases, "*.json")))
    n = 0
    with freeze_time(FROZEN_NOW):  # stub 8
        for path in files:
            name = os.path.splitext(os.path.basename(path))[0]
            if args.only and name not in args.only:
                continue
            with open(path, encoding="utf-8") as f:
                case = json.load(f)
            case["_name"] = name
            try:
                result = run_case(frappe, case)
            except Exception:  # noqa: BLE001
                print(f"HARNESS ERROR in {name}:\n{traceback.format_exc()}", file=sys.stderr)
                return 2
            with open(os.path.join(args.out, name + ".json"), "w", encoding="utf-8") as f:
                json.dump(result, f, indent=1, ensure_ascii=False, sort_keys=True)
                f.write("\n")
            n += 1
    print(f"oracle: {n} cases written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
