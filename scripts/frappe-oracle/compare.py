#!/usr/bin/env python3
"""Compare hookfleet with the Frappe oracle's expectations.

    scripts/frappe-oracle/compare.py [--report report.json] [--only CASE ...]
    scripts/frappe-oracle/compare.py --known tests/fixtures/frappe-oracle/known-differences.json
    scripts/frappe-oracle/compare.py --write-known tests/fixtures/frappe-oracle/known-differences.json

For every case of tests/fixtures/frappe-oracle/cases/ it imports the case's Webhook document
into hookfleet (`hookfleet webhook import FILE --json`, RECEIVER replaced by the receiver base
the oracle used) and previews the case's document (`hookfleet webhook preview NAME --doc FILE
--json`), then compares with tests/fixtures/frappe-oracle/expected/CASE.json (written by
oracle.py, which ran Frappe's own code; this script does not need Frappe):

  import     hookfleet accepts the document  <=> Frappe's Webhook.validate() and the insert
             checks (mandatory fields, Select options) accept it
  condition  same truth value, or both raise
  sends      hookfleet renders a body without error <=> Frappe's enqueue_webhook sends
  json       the bodies are equal as JSON values (true/false are not numbers; 2 == 2.0)
  bytes      the body bytes are identical (Frappe: json.dumps(data) re-serialised)
  url        the URL hookfleet previews == the URL requests puts on the wire for Frappe
  method     request method
  headers    the webhook's own header names, and a signature header iff Frappe signs
A comparison hookfleet cannot make because it refused the import is counted as a
disagreement when Frappe accepted the webhook and as "n/a" when Frappe refused it too.
Signature values are not compared: preview shows "[set when sent]". Cases marked
"clock_dependent" (they print now()/nowdate()) are not compared on json/bytes: the oracle froze
Frappe's clock at 2026-12-01 10:00 UTC and hookfleet's clock cannot be frozen.
HOOKFLEET_TIME_ZONE is set to UTC, the oracle site's time zone.

With --known FILE it is a check (the test suite runs it so: tests/frappe_oracle.rs): it exits 1
when a case disagrees on a check its entry in FILE does not list (a new divergence), or when a
listed check now agrees (the entry is stale: a divergence was closed, so the list shrinks with
it). Each entry says why the difference stands. --write-known FILE writes the list of this run's
disagreements, keeping the reasons of the entries already there (a new entry's reason is its
class's, from CLASS_REASONS).

Environment: HOOKFLEET_BIN (default $HOME/.cache/hookfleet/target/debug/hookfleet),
DATABASE_URL (default postgres://postgres@127.0.0.1:5432/frappe_oracle_cmp; the database is
created if missing and migrated), REDIS_URL, HOOKFLEET_REDIS_PREFIX (default oraclecmp:).
HOOKFLEET_ALLOWED_NETWORKS is set to 127.0.0.0/8 so that the loopback receiver base passes
hookfleet's guard against internal addresses.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import subprocess
import sys
import tempfile
from urllib.parse import urlsplit, urlunsplit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIX = os.path.join(ROOT, "tests", "fixtures", "frappe-oracle")
HOOKFLEET_STD_HEADERS = {"content-type", "webhook-id", "webhook-timestamp", "webhook-signature",
                         "x-frappe-webhook-signature", "user-agent"}
CHECKS = ["import", "condition", "sends", "json", "bytes", "url", "method", "headers"]


def env():
    e = dict(os.environ)
    e.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/frappe_oracle_cmp")
    e.setdefault("HOOKFLEET_REDIS_PREFIX", "oraclecmp:")
    e["HOOKFLEET_ALLOWED_NETWORKS"] = "127.0.0.0/8"
    e["HOOKFLEET_TIME_ZONE"] = "UTC"  # the oracle's site time zone
    return e


def hookfleet_bin():
    return os.environ.get("HOOKFLEET_BIN") or os.path.expanduser("~/.cache/hookfleet/target/debug/hookfleet")


def ensure_database(e):
    url = e["DATABASE_URL"]
    parts = urlsplit(url)
    dbname = parts.path.lstrip("/")
    admin = urlunsplit((parts.scheme, parts.netloc, "/postgres", parts.query, parts.fragment))
    try:
        out = subprocess.run(["psql", admin, "-tAc", f"SELECT 1 FROM pg_database WHERE datname = '{dbname}'"],
                             capture_output=True, text=True, check=True).stdout
        if out.strip() != "1":
            subprocess.run(["psql", admin, "-c", f'CREATE DATABASE "{dbname}"'], capture_output=True, text=True, check=True)
    except (FileNotFoundError, subprocess.CalledProcessError) as err:
        print(f"note: could not check/create the database with psql ({err}); assuming it exists", file=sys.stderr)
    r = subprocess.run([hookfleet_bin(), "migrate"], env=e, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"hookfleet migrate failed:\n{r.stderr}")


def run(args, e, stdin=None):
    r = subprocess.run([hookfleet_bin(), *args], env=e, capture_output=True, text=True, input=stdin)
    return r.returncode, r.stdout, r.stderr


def json_equal(a, b):
    """JSON value equality: bool is not a number, numbers compare by value, objects ignore key
    order (duplicates are already gone after parsing)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b or (a != a and b != b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def frappe_accepts(exp):
    v = exp["validation"]
    return bool(v["accepted"] and v.get("insert_checks", {}).get("accepted", True))


def compare_case(name, case, exp, e, tmp):
    res = {"case": name, "class": case.get("class"), "about": case.get("about"), "checks": {}, "frappe": {}, "hookfleet": {}}
    wh = json.loads(json.dumps(case["webhook"]))
    base = exp.get("receiver_base", "http://127.0.0.1:9/hook")
    if isinstance(wh.get("request_url"), str):
        wh["request_url"] = wh["request_url"].replace("RECEIVER", base)
    hf_name = ("oracle " + name)[:140]
    wh["name"] = hf_name
    wpath = os.path.join(tmp, name + ".webhook.json")
    dpath = os.path.join(tmp, name + ".doc.json")
    with open(wpath, "w", encoding="utf-8") as f:
        json.dump(wh, f, ensure_ascii=False)
    with open(dpath, "w", encoding="utf-8") as f:
        json.dump(case["doc"], f, ensure_ascii=False)

    # ---- import
    rc, out, err = run(["webhook", "import", wpath, "--json"], e)
    try:
        report = json.loads(out)
        item = report[0] if isinstance(report, list) else report
    except (ValueError, IndexError, KeyError):
        item = {"action": "error", "reason": (err or out).strip()[:500]}
    hf_accepts = item.get("action") in ("created", "updated", "unchanged")
    fr_accepts = frappe_accepts(exp)
    res["hookfleet"]["import"] = {"action": item.get("action"), "reason": item.get("reason")}
    res["frappe"]["validation"] = exp["validation"]
    res["checks"]["import"] = hf_accepts == fr_accepts

    fr_sends = bool(exp.get("sends"))
    fr_cond = exp.get("meets_condition")
    res["frappe"].update({
        "meets_condition": fr_cond, "fires": exp.get("fires"), "sends": fr_sends, "error": exp.get("error"),
        "body_bytes": exp.get("body_bytes"), "url": exp.get("wire_url"), "method": exp.get("method"),
        "headers": sorted((exp.get("headers") or {}).keys()), "signed": exp.get("signature") is not None,
        "content_type": exp.get("content_type"),
    })
    if not hf_accepts:
        for c in CHECKS[1:]:
            res["checks"][c] = None if not fr_accepts else False
        res["hookfleet"]["preview"] = None
        return res

    # ---- preview
    rc, out, err = run(["webhook", "preview", hf_name, "--doc", dpath, "--json"], e)
    try:
        pv = json.loads(out)
    except ValueError:
        pv = {"meets_condition": None, "condition_error": (err or out).strip()[:500], "error": (err or out).strip()[:500]}
    res["hookfleet"]["preview"] = pv

    # condition
    hf_cond_err = pv.get("condition_error")
    if isinstance(fr_cond, dict):
        res["checks"]["condition"] = bool(hf_cond_err)
    else:
        res["checks"]["condition"] = (not hf_cond_err) and bool(pv.get("meets_condition")) == bool(fr_cond)

    body = pv.get("body")
    hf_sends = pv.get("error") in (None, "") and body is not None
    res["checks"]["sends"] = hf_sends == fr_sends
    if hf_sends and fr_sends:
        try:
            hf_json = json.loads(body) if body else {}
            res["checks"]["json"] = json_equal(hf_json, exp.get("body_json"))
        except ValueError:
            res["checks"]["json"] = False
        res["checks"]["bytes"] = body == exp.get("body_bytes")
        if case.get("clock_dependent"):
            # the oracle froze Frappe's clock at 2026-12-01 10:00 UTC; hookfleet's cannot be
            # frozen, so a body that prints the time is not compared
            res["checks"]["json"] = res["checks"]["bytes"] = None
            res["note"] = "clock-dependent body: json/bytes not compared"
        res["checks"]["url"] = pv.get("url") in (exp.get("wire_url"), exp.get("url"))
        res["checks"]["method"] = (pv.get("method") or "").upper() == (exp.get("method") or "").upper()
        hf_headers = pv.get("headers") or []
        hf_keys = {h.get("key") for h in hf_headers if h.get("key") and h.get("key").lower() not in HOOKFLEET_STD_HEADERS}
        fr_keys = {k for k in (exp.get("headers") or {}) if k.lower() not in HOOKFLEET_STD_HEADERS}
        hf_signed = any((h.get("key") or "").lower() == "x-frappe-webhook-signature" for h in hf_headers)
        res["checks"]["headers"] = hf_keys == fr_keys and hf_signed == (exp.get("signature") is not None)
    else:
        same = hf_sends == fr_sends  # both send nothing: nothing to differ
        for c in ("json", "bytes", "url", "method", "headers"):
            res["checks"][c] = same
    return res


# Why the cases of a class differ, for a new entry of the known-differences list (a case's own
# entry may say better).
CLASS_REASONS = {
    "no_send": "deliberate: Frappe sends nothing (its rendered text is not JSON, or it refuses the "
               "template); hookfleet sends valid JSON",
}
OPEN_REASON = "open: not closed yet (issue 24)"


def load_known(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def check_known(results, known, every_case=True):
    """Problems: a disagreement not listed, or a listed check that now agrees (and, when
    `every_case` ran, an entry naming no case)."""
    problems = []
    seen = set()
    for r in results:
        bad = sorted(c for c in CHECKS if r["checks"].get(c) is False)
        entry = known.get(r["case"])
        listed = set(entry["checks"]) if entry else set()
        seen.add(r["case"])
        new = [c for c in bad if c not in listed]
        stale = sorted(listed - set(bad))
        if new:
            problems.append(f"{r['case']}: now differs from Frappe on {', '.join(new)}: "
                            f"Frappe {json.dumps(r['frappe'], ensure_ascii=False)[:400]} / "
                            f"hookfleet {json.dumps(r['hookfleet'], ensure_ascii=False)[:400]}")
        if stale:
            problems.append(f"{r['case']}: now agrees with Frappe on {', '.join(stale)}: "
                            f"take it out of the known differences")
    for name in sorted(set(known) - seen if every_case else ()):
        problems.append(f"{name}: listed as a known difference, but no such case ran")
    return problems


def write_known(results, path):
    old = load_known(path) if os.path.exists(path) else {}
    out = {}
    for r in results:
        bad = sorted(c for c in CHECKS if r["checks"].get(c) is False)
        if not bad:
            continue
        why = (old.get(r["case"]) or {}).get("why") or CLASS_REASONS.get(r["class"], OPEN_REASON)
        out[r["case"]] = {"class": r["class"], "checks": bad, "why": why}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False, sort_keys=True)
        f.write("\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description="hookfleet vs the Frappe oracle's expectations")
    ap.add_argument("--report", help="write the per-case JSON report here")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--cases", default=os.path.join(FIX, "cases"))
    ap.add_argument("--expected", default=os.path.join(FIX, "expected"))
    ap.add_argument("--known", help="check against this list of known differences (exit 1 on any change)")
    ap.add_argument("--write-known", help="write this run's differences to this file")
    args = ap.parse_args(argv)

    e = env()
    ensure_database(e)
    results = []
    with tempfile.TemporaryDirectory(prefix="frappe-oracle-cmp-") as tmp:
        for path in sorted(glob.glob(os.path.join(args.cases, "*.json"))):
            name = os.path.splitext(os.path.basename(path))[0]
            if args.only and name not in args.only:
                continue
            exp_path = os.path.join(args.expected, name + ".json")
            if not os.path.exists(exp_path):
                print(f"warning: no expectation for {name}; run regenerate.sh", file=sys.stderr)
                continue
            with open(path, encoding="utf-8") as f:
                case = json.load(f)
            with open(exp_path, encoding="utf-8") as f:
                exp = json.load(f)
            results.append(compare_case(name, case, exp, e, tmp))

    by_class = collections.defaultdict(lambda: {c: [0, 0] for c in CHECKS})
    totals = {c: [0, 0] for c in CHECKS}
    counts = collections.Counter()
    for r in results:
        counts[r["class"]] += 1
        for c in CHECKS:
            v = r["checks"].get(c)
            if v is None:
                continue
            by_class[r["class"]][c][1] += 1
            totals[c][1] += 1
            if v:
                by_class[r["class"]][c][0] += 1
                totals[c][0] += 1

    w = max([len(k or "") for k in by_class] + [5]) + 2
    head = "class".ljust(w) + "cases".rjust(6) + "".join(c.rjust(11) for c in CHECKS)
    print(head)
    print("-" * len(head))
    for cls in sorted(by_class):
        row = (cls or "-").ljust(w) + str(counts[cls]).rjust(6)
        for c in CHECKS:
            a, n = by_class[cls][c]
            row += f"{a}/{n}".rjust(11)
        print(row)
    print("-" * len(head))
    row = "TOTAL".ljust(w) + str(len(results)).rjust(6)
    for c in CHECKS:
        a, n = totals[c]
        row += f"{a}/{n}".rjust(11)
    print(row)
    disagree = [r for r in results if any(v is False for v in r["checks"].values())]
    print(f"\n{len(results) - len(disagree)} of {len(results)} cases agree on every check; {len(disagree)} disagree:")
    for r in disagree:
        bad = [c for c in CHECKS if r["checks"].get(c) is False]
        print(f"  {r['case']} ({r['class']}): {', '.join(bad)}")

    if args.write_known:
        write_known(results, args.write_known)
    status = 0
    if args.known:
        problems = check_known(results, load_known(args.known), every_case=not args.only)
        if problems:
            print(f"\n{len(problems)} change(s) against {args.known}:")
            for p in problems:
                print(f"  {p}")
            status = 1
        else:
            print(f"\nevery difference is one of the {len(load_known(args.known))} known in {args.known}")

    if args.report:
        with open(args.report, "w", encoding="utf-8") as f:
            json.dump({"totals": {c: {"agree": a, "compared": n} for c, (a, n) in totals.items()},
                       "by_class": {k: {c: {"agree": a, "compared": n} for c, (a, n) in v.items()} for k, v in by_class.items()},
                       "cases": results}, f, indent=1, ensure_ascii=False)
            f.write("\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
