#!/usr/bin/env bash
# Validates everything under deploy/, and fails (non-zero) on any problem:
#
#   Kubernetes  the kustomize base, and the base with every optional component,
#               rendered by scripts/kustomize_lite.py (and compared with
#               `kubectl kustomize` where kubectl is installed), then validated
#               against the Kubernetes schema (kubernetes-validate --strict,
#               in a venv of its own; the Prometheus Operator's custom
#               resources, which it has no schema for, are checked by this
#               script instead, see below), then checked for what a schema
#               cannot see (probes, securityContext, deadlines, selectors,
#               names).
#   systemd     `systemd-analyze verify` on the units (where systemd-analyze
#               exists) and `systemd-analyze security` exposure at most 4.0
#               for every service, plus the settings the units must keep.
#   Prometheus  `promtool check rules` on deploy/prometheus/hookfleet-alerts.yml
#               and `promtool test rules` on its unit tests (promtool from
#               Debian's prometheus package, installed when missing).
#   Prometheus  optional/prometheus-operator: the PodMonitor and the
#   Operator    PrometheusRule are monitoring.coreos.com/v1 with a name; the
#               PodMonitor selects every pod that serves /metrics (the
#               base's worker and ingest, the optional sweeper loop) and no
#               other long-running pod, on a port those pods name, path
#               /metrics; the PrometheusRule's spec.groups are exactly the
#               groups of hookfleet-alerts.yml (the source of truth), and
#               pass `promtool check rules` too.
#   checkov     on the rendered base, the base with every optional component
#               (framework kubernetes) and deploy/Containerfile (dockerfile),
#               checkov pinned in a venv of its own: any failed check fails
#               this script. A check is either fixed in the manifests or
#               skipped with its reason: CHECKOV_SKIP below for the whole
#               base, a checkov.io/skipN annotation on a resource, a
#               `checkov:skip=` comment in the Containerfile; every skipped
#               id must be explained in deploy/kubernetes/kustomization.yaml.
#               The counts (passed, failed, skipped) are printed.
#   Container   deploy/Containerfile's COPY sources exist and are not ignored,
#               every crate manifest is in the dependency layer, the base
#               images are pinned, the user is not root.
#
#   scripts/check-deploy.sh            # this checkout
#   scripts/check-deploy.sh DIR        # another copy of the repository
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
root="$(cd "${1:-$here}" && pwd)"
say() { printf '[check-deploy] %s\n' "$*"; }
fail() { printf '[check-deploy] FAIL: %s\n' "$*" >&2; exit 1; }

K8S_VERSION=1.37.0          # the newest schema kubernetes-validate 1.37 knows
MAX_EXPOSURE=4.0            # systemd-analyze security, per service
venv="$HOME/.cache/hookfleet/deploy-venv"
if ! "$venv/bin/python" -c 'import yaml, kubernetes_validate' 2>/dev/null; then
  say "creating $venv (kubernetes-validate, PyYAML)"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q 'kubernetes-validate==1.37.0' 'PyYAML>=6,<7'
fi
py="$venv/bin/python"
# The checks' shared Python (label selectors) is importable by name.
export PYTHONPATH="$here/scripts${PYTHONPATH:+:$PYTHONPATH}"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
k8s="$root/deploy/kubernetes"
units="$root/deploy/systemd"

# ---- Kubernetes: render ----------------------------------------------------
# The base, and an overlay of the base with every component in optional/
# (kustomize wants relative paths).
mkdir -p "$tmp/all"
rel="$(realpath --relative-to="$tmp/all" "$k8s")"
{
  echo "resources: [$rel]"
  echo "components:"
  for c in "$k8s"/optional/*/; do echo "  - $rel/optional/$(basename "$c")"; done
} > "$tmp/all/kustomization.yaml"

kubectl_kustomize=""
if command -v kubectl >/dev/null 2>&1 &&
   kubectl version --client 2>/dev/null | grep -q 'Kustomize Version: v[5-9]'; then
  kubectl_kustomize=yes
fi
for target in base all; do
  dir="$k8s"; [ "$target" = all ] && dir="$tmp/all"
  "$py" "$here/scripts/kustomize_lite.py" "$dir" > "$tmp/$target.yaml" ||
    fail "kustomize_lite could not render $target"
  if [ -n "$kubectl_kustomize" ]; then
    kubectl kustomize "$dir" > "$tmp/$target.kubectl.yaml" 2> "$tmp/err" ||
      { cat "$tmp/err" >&2; fail "kubectl kustomize could not render $target"; }
    "$py" "$here/scripts/kustomize_lite.py" "$dir" --compare "$tmp/$target.kubectl.yaml" ||
      fail "kustomize_lite and kubectl kustomize disagree on $target"
  fi
  n=$(grep -c '^kind:' "$tmp/$target.yaml" || true)
  [ "$n" -gt 0 ] || fail "$target rendered no resources"
  say "rendered $target: $n resources${kubectl_kustomize:+ (same as kubectl kustomize)}"
done
[ -n "$kubectl_kustomize" ] || say "kubectl (kustomize v5) not installed: rendered by kustomize_lite only"

# ---- Kubernetes: schema ----------------------------------------------------
# The Prometheus Operator's PodMonitor and PrometheusRule
# (optional/prometheus-operator) are custom resources: kubernetes-validate
# knows the built-in API only, and --strict fails a kind it has no schema
# for (and fetching the operator's CRD schemas would tie this check to the
# network and to one operator version). So they are left out of this step,
# from the rendered base + optional/* and from the optional files alike, and
# the section "Prometheus Operator" below checks what matters of them
# itself: apiVersion, kind, name, what the PodMonitor selects and scrapes,
# and the rules (the same as hookfleet-alerts.yml, and valid for promtool).
CRD_KINDS="PodMonitor PrometheusRule"
optional_files=()
while IFS= read -r f; do optional_files+=("$f"); done < <(
  find "$k8s/optional" -name '*.yaml' ! -name kustomization.yaml | sort)
# Each file as it is, or a copy without those kinds (none, if that is all it
# holds); the count of documents left out goes to crds.count.
mkdir -p "$tmp/kv"
kv_files=()
while IFS= read -r f; do kv_files+=("$f"); done < <(
  "$py" - "$tmp/kv" "$CRD_KINDS" "$tmp/base.yaml" "$tmp/all.yaml" "${optional_files[@]}" <<'PY'
import os, sys
import yaml
out, kinds, files = sys.argv[1], set(sys.argv[2].split()), sys.argv[3:]
left_out = 0
for i, path in enumerate(files):
    docs = [d for d in yaml.safe_load_all(open(path, encoding="utf-8")) if d]
    keep = [d for d in docs if d.get("kind") not in kinds]
    left_out += len(docs) - len(keep)
    if len(keep) == len(docs):
        print(path)
    elif keep:
        copy = os.path.join(out, f"{i}-{os.path.basename(path)}")
        with open(copy, "w", encoding="utf-8") as f:
            yaml.safe_dump_all(keep, f, sort_keys=False)
        print(copy)
with open(os.path.join(out, "crds.count"), "w") as f:
    f.write(f"{left_out}\n")
PY
)
[ "${#kv_files[@]}" -ge 2 ] || fail "no rendered manifests left to validate"
if ! "$venv/bin/kubernetes-validate" --strict --quiet -k "$K8S_VERSION" \
     "${kv_files[@]}" > "$tmp/kv.out" 2>&1 ||
   grep -q -E 'ERROR|WARN' "$tmp/kv.out"; then
  cat "$tmp/kv.out" >&2
  fail "kubernetes-validate --strict (Kubernetes $K8S_VERSION)"
fi
say "kubernetes-validate --strict -k $K8S_VERSION: base, base + optional/*, ${#optional_files[@]} optional files: valid" \
    "($(cat "$tmp/kv/crds.count") ${CRD_KINDS// //} documents left to the checks below)"

# ---- systemd ---------------------------------------------------------------
if command -v systemd-analyze >/dev/null 2>&1; then
  # verify resolves units against a root: the system's own units (targets,
  # sockets) and ours in etc/. The hookfleet binaries are not installed
  # here, so each ExecStart path gets a stub executable in the temporary
  # root: verify then checks everything but the binary itself.
  sroot="$tmp/sroot"
  mkdir -p "$sroot/etc/systemd/system" "$sroot/usr/lib/systemd"
  for d in /usr/lib/systemd/system /lib/systemd/system; do
    [ -d "$d" ] && { cp -a "$d" "$sroot/usr/lib/systemd/"; break; }
  done
  cp "$units"/*.service "$units"/*.timer "$sroot/etc/systemd/system/"
  grep -h '^ExecStart=' "$units"/*.service | sed 's/^ExecStart=[-@:+!]*//; s/ .*//' | sort -u |
    while read -r bin; do
      mkdir -p "$sroot$(dirname "$bin")"
      printf '#!/bin/sh\nexit 0\n' > "$sroot$bin"; chmod +x "$sroot$bin"
    done
  names=()
  for f in "$units"/*.service "$units"/*.timer; do
    n="$(basename "$f")"; names+=("${n/@./@1.}")
  done
  # Unknown keys are only warnings (exit 0): any output is a failure.
  if ! systemd-analyze verify --root="$sroot" --man=no "${names[@]}" > "$tmp/verify.out" 2>&1 ||
     [ -s "$tmp/verify.out" ]; then
    cat "$tmp/verify.out" >&2
    fail "systemd-analyze verify"
  fi
  say "systemd-analyze verify (binaries stubbed): ${names[*]}: clean"

  for f in "$units"/*.service; do
    out="$(systemd-analyze security --offline=yes --no-pager "$f" 2>&1)" ||
      { echo "$out" >&2; fail "systemd-analyze security $(basename "$f")"; }
    score="$(printf '%s\n' "$out" | sed -n 's/.*Overall exposure level for .*: \([0-9.]*\) .*/\1/p')"
    [ -n "$score" ] || { echo "$out" >&2; fail "no exposure level for $(basename "$f")"; }
    say "systemd-analyze security $(basename "$f"): exposure $score"
    awk -v s="$score" -v m="$MAX_EXPOSURE" 'BEGIN { exit !(s <= m) }' ||
      { printf '%s\n' "$out" | grep '✗' >&2; fail "$(basename "$f"): exposure $score > $MAX_EXPOSURE"; }
  done
else
  say "systemd-analyze not installed: unit verify and security scores SKIPPED (settings checked below)"
fi

# ---- Prometheus --------------------------------------------------------------
# (In a subshell: the services script has a `say` of its own.)
( . "$here/scripts/services.sh" && ensure_promtool )
command -v promtool >/dev/null 2>&1 || fail "promtool is needed to check the alert rules"
rules="$root/deploy/prometheus"
promtool check rules "$rules/hookfleet-alerts.yml" > "$tmp/rules.out" 2>&1 ||
  { cat "$tmp/rules.out" >&2; fail "promtool check rules"; }
(cd "$rules" && promtool test rules hookfleet-alerts.test.yml) > "$tmp/rules-test.out" 2>&1 ||
  { cat "$tmp/rules-test.out" >&2; fail "promtool test rules"; }
say "promtool: $(grep -o '[0-9]* rules found' "$tmp/rules.out"), their unit tests pass"

# ---- Prometheus Operator -----------------------------------------------------
# The custom resources kubernetes-validate leaves out (see "Kubernetes:
# schema"), checked against the rendered manifests; the PrometheusRule's
# groups are written out for promtool.
"$py" - "$tmp/base.yaml" "$tmp/all.yaml" "$rules/hookfleet-alerts.yml" \
    "$tmp/prometheusrule-groups.yml" "$CRD_KINDS" <<'PY'
import sys
import yaml

import k8s_selectors

base_path, all_path, alerts_path, groups_out, kinds = sys.argv[1:6]
kinds = kinds.split()
problems = []
def bad(msg): problems.append(msg)

def load(path):
    return [d for d in yaml.safe_load_all(open(path, encoding="utf-8")) if d]

def matches(selector, labels):
    if not selector or not (selector.get("matchLabels") or selector.get("matchExpressions")):
        return False        # an empty selector would take every pod of the namespace
    return k8s_selectors.matches(selector, labels)

# Pods that run until stopped: a Job's or CronJob's pod serves no metrics
# (the sweeper's --once tick), and declares no port the operator could use.
def long_running(docs):
    for d in docs:
        if d["kind"] in ("Deployment", "StatefulSet", "DaemonSet"):
            t = d["spec"]["template"]
            yield f"{d['kind']}/{d['metadata']['name']}", t.get("metadata", {}).get("labels") or {}, t

def port_names(template):
    return {p.get("name") for c in template.get("spec", {}).get("containers", [])
            for p in c.get("ports", []) if p.get("name")}

def serves_metrics(template):
    ann = template.get("metadata", {}).get("annotations") or {}
    return ann.get("prometheus.io/scrape") == "true" or "metrics" in port_names(template)

base, full = load(base_path), load(all_path)
crds = [d for d in full if d["kind"] in kinds]
for d in crds:
    where = f"{d['kind']}/{(d.get('metadata') or {}).get('name')}"
    if d.get("apiVersion") != "monitoring.coreos.com/v1":
        bad(f"{where}: apiVersion {d.get('apiVersion')}, expected monitoring.coreos.com/v1")
    if not (d.get("metadata") or {}).get("name"):
        bad(f"{d['kind']}: no metadata.name")
    if not isinstance(d.get("spec"), dict):
        bad(f"{where}: no spec")
for d in base:
    if d["kind"] in kinds:
        bad(f"base: {d['kind']}/{d['metadata']['name']}: the operator's CRDs may not be installed; keep it in optional/")
for kind in kinds:
    if sum(d["kind"] == kind for d in crds) != 1:
        bad(f"base + optional/*: {sum(d['kind'] == kind for d in crds)} {kind}s rendered, expected one "
            "(optional/prometheus-operator)")
if problems:
    for p in problems:
        print(f"[check-deploy] FAIL: {p}", file=sys.stderr)
    sys.exit(1)

# PodMonitor: it selects every pod that serves /metrics, and those only.
pm = next(d for d in crds if d["kind"] == "PodMonitor")
spec = pm["spec"]
where = f"PodMonitor/{pm['metadata']['name']}"
selector = spec.get("selector") or {}
endpoints = spec.get("podMetricsEndpoints") or []
if not endpoints:
    bad(f"{where}: no podMetricsEndpoints")
for e in endpoints:
    if not e.get("port"):
        bad(f"{where}: an endpoint without a port name ({e})")
    if e.get("path") != "/metrics":
        bad(f"{where}: endpoint {e.get('port')}: path {e.get('path')!r}, expected /metrics")
if spec.get("namespaceSelector"):
    bad(f"{where}: a namespaceSelector in the component (it scrapes its own namespace; an overlay may add one)")
selected = {}
for label, docs in (("base", base), ("base + optional", full)):
    for name, labels, t in long_running(docs):
        hit = matches(selector, labels)
        if hit:
            selected.setdefault(name, label)
            missing = {e.get("port") for e in endpoints} - port_names(t)
            if missing:
                bad(f"{where} selects {label} {name}, which names no container port {sorted(missing)}")
            if spec.get("jobLabel") and spec["jobLabel"] not in labels:
                bad(f"{where}: jobLabel {spec['jobLabel']} is no label of {label} {name}'s pods")
        elif serves_metrics(t):
            bad(f"{where} does not select {label} {name}, which serves /metrics")
if not any(v == "base" for v in selected.values()):
    bad(f"{where}: its selector matches no pod of the rendered base")

# PrometheusRule: the groups of hookfleet-alerts.yml, exactly.
pr = next(d for d in crds if d["kind"] == "PrometheusRule")
where = f"PrometheusRule/{pr['metadata']['name']}"
ours = pr["spec"].get("groups")
source = yaml.safe_load(open(alerts_path, encoding="utf-8")).get("groups")
if ours != source:
    names = lambda gs: [(g.get("name"), [r.get("alert") or r.get("record") for r in g.get("rules", [])])
                        for g in gs or []]
    detail = []
    for (gn, rs), (sn, ss) in zip(names(ours), names(source)):
        if (gn, rs) != (sn, ss):
            detail.append(f"group {gn!r} {rs} vs {sn!r} {ss}")
    if len(names(ours)) != len(names(source)):
        detail.append(f"{len(names(ours))} groups vs {len(names(source))}")
    if not detail:
        src = {g["name"]: g for g in source}
        for g in ours:
            for r in g.get("rules", []):
                s = next((x for x in src.get(g["name"], {}).get("rules", [])
                          if (x.get("alert"), x.get("record")) == (r.get("alert"), r.get("record"))), None)
                if r != s:
                    detail.append(f"rule {r.get('alert') or r.get('record')} in group {g['name']} differs")
    bad(f"{where}: spec.groups drifted from deploy/prometheus/hookfleet-alerts.yml, "
        f"the source of truth ({'; '.join(detail) or 'they differ'}). Copy the groups again "
        "(the commands are at the top of deploy/kubernetes/optional/prometheus-operator/prometheusrule.yaml)")

for p in problems:
    print(f"[check-deploy] FAIL: {p}", file=sys.stderr)
if problems:
    sys.exit(1)
with open(groups_out, "w", encoding="utf-8") as f:
    yaml.safe_dump({"groups": ours}, f, sort_keys=False)
print(f"[check-deploy] PodMonitor/{pm['metadata']['name']} selects {', '.join(f'{n} ({l})' for n, l in selected.items())} "
      f"on port {', '.join(e['port'] for e in endpoints)} /metrics; {where}: "
      f"the {len(ours)} groups of hookfleet-alerts.yml")
PY
promtool check rules "$tmp/prometheusrule-groups.yml" > "$tmp/prometheusrule.out" 2>&1 ||
  { cat "$tmp/prometheusrule.out" >&2; fail "promtool check rules on the PrometheusRule's groups"; }
say "promtool: the PrometheusRule's groups: $(grep -o '[0-9]* rules found' "$tmp/prometheusrule.out")"

# ---- checkov -----------------------------------------------------------------
# Pinned, in a venv of its own (its dependencies would move the deploy
# venv's pins).
CHECKOV_VERSION=3.3.30
cvenv="$HOME/.cache/hookfleet/checkov-venv"
if [ "$("$cvenv/bin/python" -c 'import importlib.metadata as m; print(m.version("checkov"))' 2>/dev/null)" \
     != "$CHECKOV_VERSION" ]; then
  say "creating $cvenv (checkov $CHECKOV_VERSION)"
  python3 -m venv "$cvenv"
  "$cvenv/bin/pip" install -q "checkov==$CHECKOV_VERSION"
fi
# Checks skipped for the whole base, each for the reason above it (as
# deploy/kubernetes/kustomization.yaml explains them too). Checks skipped for
# one resource are annotations on it (checkov.io/skipN: ID=reason); the
# Containerfile's are `checkov:skip=ID:reason` comments in it.
CHECKOV_SKIP=(
  # The default namespace should not be used: the base is namespace-less on
  # purpose (the overlay sets `namespace:`; the checks below fail a
  # namespace in the base).
  CKV_K8S_21
  # Image should use digest: the image is built from this repository and
  # pushed where each operator keeps it; its digest exists only then, and
  # the overlay's `images:` pins it (digest: sha256:...).
  CKV_K8S_43
  # Image Pull Policy should be Always: a release's tag (or the overlay's
  # digest) names one image, so IfNotPresent runs the same one; Always would
  # make every pod start, a crashed worker's restart included, depend on the
  # registry, and breaks images loaded into the nodes (kind load, minikube
  # image load). A cluster that wants each pull to check credentials turns on
  # the AlwaysPullImages admission plugin.
  CKV_K8S_15
)
mkdir -p "$tmp/checkov"
cp "$tmp/base.yaml" "$tmp/all.yaml" "$tmp/checkov/"
# checkov knows a Dockerfile by its name only.
cp "$root/deploy/Containerfile" "$tmp/checkov/Containerfile.Dockerfile"
# No network: no platform mappings (--skip-download), no update check.
(cd "$tmp/checkov" &&
 CKV_SKIP_PACKAGE_UPDATE_CHECK=true BC_SKIP_MAPPING=TRUE "$cvenv/bin/checkov" --skip-download \
   --framework kubernetes dockerfile -f base.yaml -f all.yaml -f Containerfile.Dockerfile \
   --skip-check "$(IFS=,; echo "${CHECKOV_SKIP[*]}")" -o json > out.json 2> err) || true
"$py" - "$tmp/checkov/out.json" "$k8s/kustomization.yaml" "${CHECKOV_SKIP[@]}" <<'PY' ||
import json, re, sys

out_path, kust_path, skip_list = sys.argv[1], sys.argv[2], sys.argv[3:]
try:
    reports = json.load(open(out_path, encoding="utf-8"))
except ValueError as e:
    sys.exit(f"[check-deploy] FAIL: checkov gave no JSON report ({e})")
reports = reports if isinstance(reports, list) else [reports]
by = {r.get("check_type"): r for r in reports}
problems, skipped_ids, lines = [], set(skip_list), []
# The files as scanned, as a person knows them.
names = {"base.yaml": "rendered base", "all.yaml": "rendered base + optional/*",
         "Containerfile.Dockerfile": "deploy/Containerfile"}
for kind, what in (("kubernetes", "base, base + optional/*"), ("dockerfile", "deploy/Containerfile")):
    r = by.get(kind)
    if not r:
        problems.append(f"checkov: no {kind} report ({what} not scanned)")
        continue
    s, res = r["summary"], r["results"]
    if s.get("parsing_errors"):
        problems.append(f"checkov {kind}: {s['parsing_errors']} files it could not parse")
    for c in res.get("failed_checks", []):
        lines_ = "-".join(str(n) for n in c.get("file_line_range") or [])
        f = c["file_path"].lstrip("/")
        problems.append(f"checkov {kind}: {c['check_id']} {c['check_name']}: "
                        f"{c['resource'].replace('Containerfile.Dockerfile', 'deploy/Containerfile')} "
                        f"({names.get(f, f)}, lines {lines_}): fix it, or skip it with its reason")
    for c in res.get("skipped_checks", []):
        reason = (c.get("check_result") or {}).get("suppress_comment") or ""
        if not reason.strip() or reason.strip() == "No comment provided":
            problems.append(f"checkov {kind}: {c['check_id']} skipped without a reason for {c['resource']}")
        skipped_ids.add(c["check_id"])
    lines.append(f"{kind} ({what}): {s['passed']} passed, {s['failed']} failed, {s['skipped']} skipped")
kust = open(kust_path, encoding="utf-8").read()
comments = "\n".join(l for l in kust.splitlines() if l.lstrip().startswith("#"))
for cid in sorted(skipped_ids):
    if not re.search(rf"\b{cid}\b", comments):
        problems.append(f"checkov: {cid} is skipped but not explained in deploy/kubernetes/kustomization.yaml's comments")
for l in lines:
    print(f"[check-deploy] checkov: {l}")
for p in problems:
    print(f"[check-deploy] FAIL: {p}", file=sys.stderr)
if problems:
    sys.exit(1)
print(f"[check-deploy] checkov: not run, for the whole base (CHECKOV_SKIP): {', '.join(skip_list)}")
PY
  { sed -n '1,20p' "$tmp/checkov/err" >&2; fail "checkov $CHECKOV_VERSION"; }

# ---- What a schema cannot see ----------------------------------------------
"$py" - "$root" "$tmp/base.yaml" "$tmp/all.yaml" <<'PY'
import glob, os, re, sys
import yaml

root, base_path, all_path = sys.argv[1:4]
problems = []
def bad(msg): problems.append(msg)

def seconds(text):
    m = re.fullmatch(r"(\d+)\s*(ms|s|m|min|h)?", str(text).strip())
    if not m:
        raise ValueError(f"not a duration: {text!r}")
    n, unit = int(m.group(1)), m.group(2) or "s"
    return n / 1000 if unit == "ms" else n * {"s": 1, "m": 60, "min": 60, "h": 3600}[unit]

def source(path):
    with open(os.path.join(root, path), encoding="utf-8") as f:
        return f.read()

# Facts from the code the deploy files must agree with.
m = re.search(r'HOOKFLEET_DRAIN_TIMEOUT",\s*default_value\s*=\s*"([^"]+)"', source("crates/worker/src/main.rs"))
if not m:
    sys.exit("check-deploy: the worker's --drain-timeout default is not where this check reads it "
             "(crates/worker/src/main.rs): update scripts/check-deploy.sh")
drain_default = seconds(m.group(1))
m = re.search(r"SHUTDOWN_WAIT:\s*Duration\s*=\s*Duration::from_secs\((\d+)\)", source("crates/producer/src/ingest.rs"))
if not m:
    sys.exit("check-deploy: the ingest's SHUTDOWN_WAIT is not where this check reads it "
             "(crates/producer/src/ingest.rs): update scripts/check-deploy.sh")
shutdown_wait = int(m.group(1))
flags, envs = set(), {"RUST_LOG"}
arg = re.compile(r'#\[arg\((.*?)\)\]\s*\n(?:\s*(?:///[^\n]*|#\[[^\n]*\])\n)*\s*(?:pub\s+)?(\w+)\s*:', re.S)
for f in glob.glob(os.path.join(root, "crates/**/*.rs"), recursive=True):
    text = open(f, encoding="utf-8").read()
    envs |= set(re.findall(r'\benv\s*=\s*"([A-Z0-9_]+)"', text))
    for attrs, field in arg.findall(text):
        if re.search(r"\blong\b", attrs):
            named = re.search(r'\blong\s*=\s*"([^"]+)"', attrs)
            flags.add("--" + (named.group(1) if named else field.replace("_", "-")))
SECRET_KEYS = {"database-url", "redis-url", "secret-key", "ingest-token", "console-token", "console-read-token"}
BINARIES = {"hookfleet", "hookfleet-worker", "hookfleet-sweeper", "hookfleet-producer"}

def used_flags(words, where):
    for w in words:
        if str(w).startswith("--") and str(w).split("=")[0] not in flags:
            bad(f"{where}: {w} is no flag of any hookfleet binary")

# ---- Kubernetes ----
kust = yaml.safe_load(open(os.path.join(root, "deploy/kubernetes/kustomization.yaml")))
image = next((f"{i['newName']}:{i['newTag']}" for i in kust.get("images", []) if i["name"] == "hookfleet"), None)
if not image:
    bad("kustomization.yaml: no `images:` entry for hookfleet (the image must be overridable)")

def pod_templates(res):
    kind, spec = res["kind"], res.get("spec", {})
    if kind in ("Deployment", "Job", "StatefulSet", "DaemonSet"):
        return [spec.get("template", {})]
    if kind == "CronJob":
        return [spec.get("jobTemplate", {}).get("spec", {}).get("template", {})]
    return []

from k8s_selectors import matches

def check_k8s(path, label):
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    configmaps = {n for k, n in by if k == "ConfigMap"}
    templates = {key: t for key, d in by.items() for t in pod_templates(d)}
    for (kind, name), d in by.items():
        where = f"{label}: {kind}/{name}"
        if kind == "Secret":
            bad(f"{where}: a Secret in the manifests (the operator creates Secret hookfleet)")
        if d["metadata"].get("namespace"):
            bad(f"{where}: the base is namespace-less")
        if (d["metadata"].get("labels") or {}).get("app.kubernetes.io/part-of") != "hookfleet" or any(
                (t.get("metadata", {}).get("labels") or {}).get("app.kubernetes.io/part-of") != "hookfleet"
                for t in pod_templates(d)):
            bad(f"{where}: not labelled app.kubernetes.io/part-of=hookfleet (it and its pod template)")
        if kind == "ConfigMap":
            for key in d.get("data", {}):
                if key not in envs:
                    bad(f"{where}: {key} is no hookfleet environment variable")
                if key in ("DATABASE_URL", "REDIS_URL") or "TOKEN" in key or "SECRET_KEY" in key:
                    bad(f"{where}: {key} is a secret; it belongs in the Secret")
            if "HOOKFLEET_SWEEP_INTERVAL" in d.get("data", {}):
                bad(f"{where}: HOOKFLEET_SWEEP_INTERVAL in the shared ConfigMap is ignored by the CronJob; give the loop its --interval flag")
        for t in pod_templates(d):
            spec = t.get("spec", {})
            labels = t.get("metadata", {}).get("labels", {})
            psc = spec.get("securityContext", {})
            if spec.get("automountServiceAccountToken") is not False:
                bad(f"{where}: automountServiceAccountToken is not false")
            if (psc.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
                bad(f"{where}: pod seccompProfile is not RuntimeDefault")
            if kind == "Deployment" and not matches(d["spec"].get("selector", {}), labels):
                bad(f"{where}: selector does not match the pod template's labels")
            for c in spec.get("initContainers", []) + spec.get("containers", []):
                cw = f"{where} container {c['name']}"
                sc = c.get("securityContext", {})
                if not (sc.get("runAsNonRoot") or psc.get("runAsNonRoot")):
                    bad(f"{cw}: runAsNonRoot is not true")
                if sc.get("allowPrivilegeEscalation") is not False:
                    bad(f"{cw}: allowPrivilegeEscalation is not false")
                if sc.get("readOnlyRootFilesystem") is not True:
                    bad(f"{cw}: readOnlyRootFilesystem is not true")
                if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
                    bad(f"{cw}: capabilities do not drop ALL")
                if (sc.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
                    bad(f"{cw}: seccompProfile is not RuntimeDefault")
                res = c.get("resources", {})
                if not (res.get("requests", {}).get("cpu") and res.get("requests", {}).get("memory")
                        and res.get("limits", {}).get("memory")):
                    bad(f"{cw}: needs cpu and memory requests and a memory limit")
                if image and c.get("image") != image:
                    bad(f"{cw}: image {c.get('image')} escapes the kustomize `images:` override")
                cmd = c.get("command", [])
                if not cmd or cmd[0] not in BINARIES:
                    bad(f"{cw}: command {cmd} does not start with a hookfleet binary")
                used_flags(cmd + c.get("args", []), cw)
                for e in c.get("envFrom", []):
                    ref = (e.get("configMapRef") or {}).get("name")
                    if ref is not None and ref not in configmaps:
                        bad(f"{cw}: envFrom names ConfigMap {ref}, which is not rendered")
                for e in c.get("env", []):
                    if e["name"] not in envs:
                        bad(f"{cw}: {e['name']} is no hookfleet environment variable")
                    ref = (e.get("valueFrom") or {}).get("secretKeyRef")
                    if ref and (ref["name"] != "hookfleet" or ref["key"] not in SECRET_KEYS):
                        bad(f"{cw}: secretKeyRef {ref} is not one of Secret hookfleet's documented keys")
            long_running = kind == "Deployment"
            # The console keeps no metrics of the fleet (the workers and the
            # sweeper export them): it serves /livez and /readyz on its own
            # port, and nothing to scrape.
            scraped = labels.get("app.kubernetes.io/component") != "console"
            for c in spec.get("containers", []) if long_running else []:
                cw = f"{where} container {c['name']}"
                ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
                args = c.get("command", []) + c.get("args", [])
                if scraped and ("--metrics-listen" not in args or ports.get("metrics") != 9464
                                or args[args.index("--metrics-listen") + 1] != "0.0.0.0:9464"):
                    bad(f"{cw}: must serve --metrics-listen 0.0.0.0:9464 on a port named metrics")
                ann = t.get("metadata", {}).get("annotations", {})
                if scraped and (ann.get("prometheus.io/scrape") != "true" or ann.get("prometheus.io/port") != "9464"):
                    bad(f"{where}: prometheus scrape annotations missing")
                for probe, path in (("livenessProbe", "/livez"), ("readinessProbe", "/readyz")):
                    get = (c.get(probe) or {}).get("httpGet") or {}
                    if get.get("path") != path:
                        bad(f"{cw}: {probe} is not an httpGet of {path}")
                    elif get.get("port") not in ports and get.get("port") not in ports.values():
                        bad(f"{cw}: {probe} port {get.get('port')} is no port of the container")
            component = labels.get("app.kubernetes.io/component")
            if kind == "Deployment" and component in ("worker", "ingest"):
                if not any(c.get("command") == ["hookfleet", "migrate"] for c in spec.get("initContainers", [])):
                    bad(f"{where}: no `hookfleet migrate` initContainer before it starts")
            grace = spec.get("terminationGracePeriodSeconds", 30)
            if kind == "Deployment" and component == "worker":
                cm = next((by[("ConfigMap", n)] for k, n in by if k == "ConfigMap"), {})
                drain = seconds(cm.get("data", {}).get("HOOKFLEET_DRAIN_TIMEOUT", drain_default))
                if grace <= drain:
                    bad(f"{where}: terminationGracePeriodSeconds {grace} is not above the drain timeout {drain:g}s")
            if kind == "Deployment" and component == "ingest":
                pre = 0
                for c in spec.get("containers", []):
                    cmd = (((c.get("lifecycle") or {}).get("preStop") or {}).get("exec") or {}).get("command", [])
                    if cmd[:1] == ["sleep"]:
                        pre = int(cmd[1])
                if grace <= shutdown_wait + pre:
                    bad(f"{where}: terminationGracePeriodSeconds {grace} is not above {pre} s preStop + {shutdown_wait} s SHUTDOWN_WAIT")
        if kind == "CronJob":
            s = d["spec"]
            if s.get("concurrencyPolicy") != "Forbid":
                bad(f"{where}: concurrencyPolicy is not Forbid")
            if not s.get("startingDeadlineSeconds"):
                bad(f"{where}: no startingDeadlineSeconds")
            m = re.fullmatch(r"\*/(\d+) \* \* \* \*", s.get("schedule", ""))
            deadline = s.get("jobTemplate", {}).get("spec", {}).get("activeDeadlineSeconds")
            if not deadline or (m and deadline >= int(m.group(1)) * 60):
                bad(f"{where}: activeDeadlineSeconds must be set and shorter than the schedule's interval")
        if kind in ("Service", "PodDisruptionBudget", "NetworkPolicy"):
            sel = d["spec"].get("selector") if kind == "Service" else \
                d["spec"].get("selector" if kind == "PodDisruptionBudget" else "podSelector")
            sel = sel if kind != "Service" else {"matchLabels": sel}
            if not sel or not any(matches(sel, t.get("metadata", {}).get("labels", {})) for t in templates.values()):
                bad(f"{where}: its selector matches no pod template")
        if kind == "NetworkPolicy":
            for rule in d["spec"].get("ingress", []):
                for peer in rule.get("from", []):
                    if "namespaceSelector" in peer or "ipBlock" in peer:
                        bad(f"{where}: namespaceSelector/ipBlock in the base")
        if kind == "HorizontalPodAutoscaler":
            ref = d["spec"]["scaleTargetRef"]
            target = by.get((ref["kind"], ref["name"]))
            if not target:
                bad(f"{where}: scaleTargetRef {ref['kind']}/{ref['name']} is not rendered")
            elif "replicas" in target["spec"]:
                bad(f"{where}: {ref['name']} still sets replicas (each apply would reset the scale)")
    return by

base = check_k8s(base_path, "base")
check_k8s(all_path, "base + optional")
for need in [("Deployment", "hookfleet-worker"), ("Deployment", "hookfleet-ingest"),
             ("CronJob", "hookfleet-sweeper"), ("Service", "hookfleet-ingest"),
             ("NetworkPolicy", "hookfleet-ingest"), ("PodDisruptionBudget", "hookfleet-worker")]:
    if need not in base:
        bad(f"base: no {need[0]}/{need[1]}")

# ---- systemd ----
def unit(path):
    sections, cur = {}, None
    for line in open(path, encoding="utf-8"):
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            cur = sections.setdefault(line.strip("[]"), {})
        else:
            k, _, v = line.partition("=")
            cur.setdefault(k.strip(), []).append(v.strip())
    return sections

udir = os.path.join(root, "deploy/systemd")
services = sorted(glob.glob(os.path.join(udir, "*.service")))
want = {"hookfleet-worker@.service", "hookfleet-sweeper.service", "hookfleet-ingest.service",
        "hookfleet-migrate.service"}
missing = want - {os.path.basename(p) for p in services}
if missing:
    bad(f"deploy/systemd: missing {sorted(missing)}")
if not os.path.exists(os.path.join(udir, "hookfleet-sweeper.timer")):
    bad("deploy/systemd: no hookfleet-sweeper.timer")
for p in services:
    name = os.path.basename(p)
    s = unit(p).get("Service", {})
    one = lambda k, d=None: s.get(k, [d])[-1]
    if one("DynamicUser") != "yes" and one("User", "root") in ("root", "0"):
        bad(f"{name}: runs as root (DynamicUser=yes or a dedicated User=)")
    for k, v in [("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"), ("PrivateTmp", "yes"),
                 ("MemoryDenyWriteExecute", "yes"), ("EnvironmentFile", "/etc/hookfleet/hookfleet.env"),
                 ("RestrictAddressFamilies", "AF_INET AF_INET6 AF_UNIX")]:
        if one(k) != v:
            bad(f"{name}: {k}={v} expected, found {one(k)}")
    if "@system-service" not in s.get("SystemCallFilter", []):
        bad(f"{name}: SystemCallFilter=@system-service missing")
    words = one("ExecStart", "").split()
    if not words or os.path.basename(words[0]) not in BINARIES:
        bad(f"{name}: ExecStart does not run a hookfleet binary")
    used_flags(words[1:], name)
    for e in s.get("Environment", []):
        if e.split("=")[0] not in envs:
            bad(f"{name}: Environment {e} names no hookfleet variable")
    if one("Type") != "oneshot":
        if one("KillMode") != "mixed" or not one("Restart") or not one("TimeoutStopSec"):
            bad(f"{name}: a long-running unit needs KillMode=mixed, Restart= and TimeoutStopSec=")
    if name.startswith("hookfleet-worker@"):
        if seconds(one("TimeoutStopSec", "0")) <= drain_default:
            bad(f"{name}: TimeoutStopSec is not above the drain timeout ({drain_default:g}s)")
    if name.startswith(("hookfleet-worker@", "hookfleet-ingest")):
        if int(one("LimitNOFILE", "0")) < 65536:
            bad(f"{name}: LimitNOFILE below 65536 (--concurrency goes to 10,000)")
    if name == "hookfleet-ingest.service" and seconds(one("TimeoutStopSec", "0")) <= shutdown_wait:
        bad(f"{name}: TimeoutStopSec is not above SHUTDOWN_WAIT ({shutdown_wait}s)")
    if name == "hookfleet-sweeper.service":
        timer = unit(os.path.join(udir, "hookfleet-sweeper.timer")).get("Timer", {})
        if "--once" not in words:
            bad(f"{name}: the timer's service must run --once")
        every = seconds(timer.get("OnUnitActiveSec", ["0"])[-1])
        if not one("TimeoutStartSec") or seconds(one("TimeoutStartSec")) >= every:
            bad(f"{name}: TimeoutStartSec must end a hung tick before the next one ({every:g}s)")
for line in open(os.path.join(udir, "hookfleet.env.example"), encoding="utf-8"):
    key = line.lstrip("# ").split("=")[0].strip()
    if "=" in line and re.fullmatch(r"[A-Z][A-Z0-9_]+", key) and key not in envs:
        bad(f"hookfleet.env.example: {key} is no hookfleet environment variable")
    if line.startswith(("HOOKFLEET_SWEEP_INTERVAL", "HOOKFLEET_METRICS_LISTEN")):
        bad(f"hookfleet.env.example: {key} set for every unit")

# ---- Container ----
cf_path = os.path.join(root, "deploy/Containerfile")
cf = open(cf_path, encoding="utf-8").read().replace("\\\n", " ")
ignore = open(os.path.join(root, ".containerignore"), encoding="utf-8").read()
docker_ignore = os.path.join(root, "deploy/Containerfile.dockerignore")
if not os.path.exists(docker_ignore) or open(docker_ignore, encoding="utf-8").read() != ignore:
    bad("deploy/Containerfile.dockerignore differs from .containerignore")
patterns = [l.strip().rstrip("/") for l in ignore.splitlines() if l.strip() and not l.startswith("#")]
for must in ("target", ".git"):
    if must not in patterns:
        bad(f".containerignore does not exclude {must}/")
froms = re.findall(r"^FROM\s+(\S+)", cf, re.M)
for f in froms:
    if not (re.search(r":[^/]*\d+\.\d+", f) or "@sha256:" in f):
        bad(f"Containerfile: base image {f} is not pinned to an exact version")
copied = []
for line in re.findall(r"^COPY\s+(.*)$", cf, re.M):
    words = line.split()
    if any(w.startswith("--from") for w in words):
        continue
    copied += [w for w in words[:-1] if not w.startswith("--")]
import fnmatch
for src in copied:
    if not glob.glob(os.path.join(root, src)):
        bad(f"Containerfile: COPY {src}: no such file")
    if any(fnmatch.fnmatch(src, p) or src == p or src.startswith(p + "/") for p in patterns):
        bad(f"Containerfile: COPY {src} is excluded by .containerignore")
for manifest in sorted(glob.glob(os.path.join(root, "crates/*/Cargo.toml"))):
    rel = os.path.relpath(manifest, root)
    if rel not in copied:
        bad(f"Containerfile: {rel} is not in the dependency layer")
user = re.findall(r"^USER\s+(\S+)", cf.split(re.findall(r"^FROM .*$", cf, re.M)[-1])[-1], re.M)
if not user or user[-1].split(":")[0] in ("0", "root") or not user[-1].split(":")[0].isdigit():
    bad("Containerfile: the final stage must end with a numeric non-root USER")

for p in problems:
    print(f"[check-deploy] FAIL: {p}", file=sys.stderr)
if problems:
    sys.exit(1)
print(f"[check-deploy] manifests, units and Containerfile agree with the code "
      f"({len(flags)} flags, {len(envs)} environment variables known; drain timeout {drain_default:g}s, "
      f"ingest SHUTDOWN_WAIT {shutdown_wait}s)")
PY
say "OK"
