#!/usr/bin/env python3
"""Render a kustomization as `kubectl kustomize` (kustomize v5) does, for the
few features deploy/kubernetes uses, so that CI can validate the manifests on
a machine without kubectl or kustomize.

  kustomize_lite.py DIR                 rendered YAML on stdout
  kustomize_lite.py DIR --compare FILE  exit 1 unless FILE (e.g. the output
                                        of `kubectl kustomize DIR`) holds the
                                        same resources

Supported, exactly: `resources` (files and directories), `components`,
`configMapGenerator` (name + literals; the content-hash name suffix and the
references to it), `patches` (JSON 6902 operations with a kind/name target),
`labels` (pairs, includeSelectors false, includeTemplates) and `images`
(name, newName, newTag). Anything else in a kustomization is an error rather
than silently ignored: keep deploy/kubernetes to these, or teach them here.
scripts/check-deploy.sh compares this renderer with `kubectl kustomize`
wherever kubectl is installed.
"""

import copy
import hashlib
import json
import os
import sys

import yaml

KEYS = {
    "Kustomization": {"apiVersion", "kind", "resources", "components", "labels",
                      "images", "configMapGenerator", "patches"},
    "Component": {"apiVersion", "kind", "resources", "components", "labels",
                  "images", "configMapGenerator", "patches"},
}

# Kinds whose pod template (and, for CronJob, job template) carry labels when
# a `labels` entry sets includeTemplates.
TEMPLATE_LABEL_PATHS = {
    "Deployment": [("spec", "template", "metadata", "labels")],
    "ReplicaSet": [("spec", "template", "metadata", "labels")],
    "DaemonSet": [("spec", "template", "metadata", "labels")],
    "StatefulSet": [("spec", "template", "metadata", "labels")],
    "Job": [("spec", "template", "metadata", "labels")],
    "CronJob": [("spec", "jobTemplate", "metadata", "labels"),
                ("spec", "jobTemplate", "spec", "template", "metadata", "labels")],
}

# kustomize's legacy output order (then any other kind, by name).
ORDER = ["Namespace", "ResourceQuota", "StorageClass", "CustomResourceDefinition",
         "ServiceAccount", "PodSecurityPolicy", "Role", "ClusterRole", "RoleBinding",
         "ClusterRoleBinding", "ConfigMap", "Secret", "Endpoints", "Service",
         "LimitRange", "PriorityClass", "PersistentVolume", "PersistentVolumeClaim",
         "Deployment", "StatefulSet", "CronJob", "PodDisruptionBudget"]
LAST = ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]


class RenderError(Exception):
    pass


def load_kustomization(directory):
    for name in ("kustomization.yaml", "kustomization.yml", "Kustomization"):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                k = yaml.safe_load(f) or {}
            if not isinstance(k, dict):
                raise RenderError(f"{path}: not a mapping")
            return path, k
    raise RenderError(f"{directory}: no kustomization.yaml")


def read_resources(path):
    with open(path, encoding="utf-8") as f:
        try:
            docs = [d for d in yaml.safe_load_all(f) if d is not None]
        except yaml.YAMLError as e:
            raise RenderError(f"{path}: {e}") from e
    for d in docs:
        if not isinstance(d, dict) or not d.get("apiVersion") or not d.get("kind") \
                or not (d.get("metadata") or {}).get("name"):
            raise RenderError(f"{path}: a document without apiVersion, kind or metadata.name")
    return docs


def rid(res):
    return (res["kind"], res["metadata"]["name"])


def add(acc, new, origin):
    seen = {rid(r) for r in acc}
    for r in new:
        if rid(r) in seen:
            raise RenderError(f"{origin}: {rid(r)} is defined twice")
        seen.add(rid(r))
        acc.append(r)


def run(directory, acc, generated, expect):
    path, k = load_kustomization(directory)
    kind = k.get("kind", "Kustomization")
    if kind != expect:
        raise RenderError(f"{path}: kind {kind}, expected {expect}")
    unknown = set(k) - KEYS[kind]
    if unknown:
        raise RenderError(f"{path}: unsupported field(s) {sorted(unknown)}")

    for entry in k.get("resources") or []:
        target = os.path.normpath(os.path.join(directory, entry))
        if os.path.isdir(target):
            sub, sub_generated = [], set()
            run(target, sub, sub_generated, "Kustomization")
            add(acc, sub, path)
            generated |= sub_generated
        elif os.path.isfile(target):
            add(acc, read_resources(target), path)
        else:
            raise RenderError(f"{path}: resource {entry} not found")

    for entry in k.get("components") or []:
        run(os.path.normpath(os.path.join(directory, entry)), acc, generated, "Component")

    for gen in k.get("configMapGenerator") or []:
        unknown = set(gen) - {"name", "literals"}
        if unknown:
            raise RenderError(f"{path}: configMapGenerator: unsupported {sorted(unknown)}")
        data = {}
        for lit in gen.get("literals") or []:
            if not isinstance(lit, str) or "=" not in lit:
                raise RenderError(f"{path}: literal {lit!r} is not KEY=VALUE")
            key, value = lit.split("=", 1)
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            data[key] = value
        cm = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": {"name": gen["name"]}, "data": data}
        add(acc, [cm], path)
        generated.add(gen["name"])

    for patch in k.get("patches") or []:
        apply_patch(path, directory, patch, acc)
    for entry in k.get("labels") or []:
        apply_labels(path, entry, acc)
    for entry in k.get("images") or []:
        apply_image(path, entry, acc)


def apply_patch(path, directory, patch, acc):
    unknown = set(patch) - {"target", "patch", "path"}
    if unknown:
        raise RenderError(f"{path}: patches: unsupported {sorted(unknown)}")
    target = patch.get("target") or {}
    if set(target) - {"kind", "name"} or not target.get("kind") or not target.get("name"):
        raise RenderError(f"{path}: a patch target must be exactly a kind and a name")
    if "path" in patch:
        with open(os.path.join(directory, patch["path"]), encoding="utf-8") as f:
            text = f.read()
    else:
        text = patch.get("patch", "")
    ops = yaml.safe_load(text)
    if not isinstance(ops, list):
        raise RenderError(f"{path}: only JSON 6902 patches (a list of operations) are supported")
    hits = [r for r in acc if rid(r) == (target["kind"], target["name"])]
    if not hits:
        raise RenderError(f"{path}: patch target {target['kind']}/{target['name']} matches nothing")
    for res in hits:
        for op in ops:
            json6902(res, op, path)


def pointer(path_text):
    if path_text == "":
        return []
    if not path_text.startswith("/"):
        raise RenderError(f"bad JSON pointer {path_text!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path_text[1:].split("/")]


def json6902(doc, op, where):
    kind, parts = op.get("op"), pointer(op.get("path", ""))
    if not parts:
        raise RenderError(f"{where}: a patch on the whole document")
    parent = doc
    for p in parts[:-1]:
        try:
            parent = parent[int(p)] if isinstance(parent, list) else parent[p]
        except (KeyError, IndexError, ValueError) as e:
            raise RenderError(f"{where}: {op['path']}: no such path") from e
    last = parts[-1]
    if isinstance(parent, list):
        index = len(parent) if last == "-" else int(last)
        if kind == "add":
            parent.insert(index, copy.deepcopy(op["value"]))
        elif kind in ("remove", "replace") and 0 <= index < len(parent):
            if kind == "remove":
                del parent[index]
            else:
                parent[index] = copy.deepcopy(op["value"])
        else:
            raise RenderError(f"{where}: {kind} {op['path']}: not applicable")
    elif isinstance(parent, dict):
        if kind == "add":
            parent[last] = copy.deepcopy(op["value"])
        elif kind in ("remove", "replace") and last in parent:
            if kind == "remove":
                del parent[last]
            else:
                parent[last] = copy.deepcopy(op["value"])
        else:
            raise RenderError(f"{where}: {kind} {op['path']}: not applicable")
    else:
        raise RenderError(f"{where}: {op['path']}: parent is a scalar")


def at(doc, keys):
    node = doc
    for key in keys:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    return node


def apply_labels(path, entry, acc):
    unknown = set(entry) - {"pairs", "includeSelectors", "includeTemplates"}
    if unknown or entry.get("includeSelectors"):
        raise RenderError(f"{path}: labels: only pairs and includeTemplates are supported")
    pairs = {str(k): str(v) for k, v in (entry.get("pairs") or {}).items()}
    for res in acc:
        at(res, ("metadata", "labels")).update(pairs)
        if entry.get("includeTemplates"):
            for keys in TEMPLATE_LABEL_PATHS.get(res["kind"], []):
                at(res, keys).update(pairs)


def split_image(image):
    if "@" in image:
        raise RenderError(f"image {image}: digests are not supported here")
    slash = image.rfind("/")
    colon = image.rfind(":")
    if colon > slash:
        return image[:colon], image[colon + 1:]
    return image, None


def containers(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("containers", "initContainers", "ephemeralContainers") \
                    and isinstance(value, list):
                yield from (c for c in value if isinstance(c, dict))
            else:
                yield from containers(value)
    elif isinstance(node, list):
        for value in node:
            yield from containers(value)


def apply_image(path, entry, acc):
    unknown = set(entry) - {"name", "newName", "newTag"}
    if unknown:
        raise RenderError(f"{path}: images: unsupported {sorted(unknown)}")
    for res in acc:
        for c in containers(res):
            if "image" not in c:
                continue
            name, tag = split_image(c["image"])
            if name != entry["name"]:
                continue
            name = entry.get("newName", name)
            tag = str(entry["newTag"]) if "newTag" in entry else tag
            c["image"] = f"{name}:{tag}" if tag else name


def suffix(cm):
    """kustomize's name hash of a ConfigMap (api/hasher): the sha256 of
    {"data", "kind", "name"} as Go's encoding/json writes it, where "name" is
    always empty (kustomize looks it up as one field named "metadata/name"),
    its first ten hex digits with 0, 1, 3, a, e made letters."""
    encoded = {"data": cm.get("data") or "", "kind": "ConfigMap", "name": ""}
    if cm.get("binaryData"):
        encoded["binaryData"] = cm["binaryData"]
    text = json.dumps(encoded, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    # Go escapes these in strings; json.dumps does not.
    text = (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:10]
    return digest.translate(str.maketrans("013ae", "ghkmt"))


def rename_refs(node, renamed):
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("configMapRef", "configMapKeyRef", "configMap") \
                    and isinstance(value, dict) and value.get("name") in renamed:
                value["name"] = renamed[value["name"]]
            else:
                rename_refs(value, renamed)
    elif isinstance(node, list):
        for value in node:
            rename_refs(value, renamed)


def render(directory):
    acc, generated = [], set()
    run(directory, acc, generated, "Kustomization")
    renamed = {}
    for res in acc:
        name = res["metadata"]["name"]
        if res["kind"] == "ConfigMap" and name in generated:
            renamed[name] = f"{name}-{suffix(res)}"
            res["metadata"]["name"] = renamed[name]
    for res in acc:
        rename_refs(res, renamed)

    def order(res):
        kind = res["kind"]
        if kind in ORDER:
            rank = ORDER.index(kind)
        elif kind in LAST:
            rank = len(ORDER) + 1 + LAST.index(kind)
        else:
            rank = len(ORDER)
        return (rank, kind if rank == len(ORDER) else "", res["metadata"]["name"])
    return sorted(acc, key=order)


def compare(ours, theirs_path):
    with open(theirs_path, encoding="utf-8") as f:
        theirs = [d for d in yaml.safe_load_all(f) if d is not None]
    a = {rid(r): r for r in ours}
    b = {rid(r): r for r in theirs}
    problems = []
    for key in sorted(set(a) | set(b)):
        if key not in a:
            problems.append(f"{key[0]}/{key[1]}: only in {theirs_path}")
        elif key not in b:
            problems.append(f"{key[0]}/{key[1]}: only in this renderer's output")
        elif a[key] != b[key]:
            ours_text = yaml.safe_dump(a[key], sort_keys=True).splitlines()
            theirs_text = yaml.safe_dump(b[key], sort_keys=True).splitlines()
            import difflib
            diff = "\n".join(difflib.unified_diff(theirs_text, ours_text, theirs_path,
                                                  "kustomize_lite", lineterm=""))
            problems.append(f"{key[0]}/{key[1]} differs:\n{diff}")
    return problems


def main(argv):
    if len(argv) not in (2, 4) or (len(argv) == 4 and argv[2] != "--compare"):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        resources = render(argv[1])
    except (RenderError, OSError, KeyError, TypeError, ValueError) as e:
        print(f"kustomize_lite: {e}", file=sys.stderr)
        return 1
    if len(argv) == 4:
        problems = compare(resources, argv[3])
        for p in problems:
            print(f"kustomize_lite: {p}", file=sys.stderr)
        return 1 if problems else 0
    sys.stdout.write(yaml.safe_dump_all(resources, sort_keys=True, default_flow_style=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
