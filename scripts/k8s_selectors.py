"""Label selectors as Kubernetes reads them, for scripts/check-deploy.sh's
checks (a PodMonitor's pods, a NetworkPolicy's and a PodDisruptionBudget's):
matchLabels and the four matchExpressions operators."""


def matches(selector, labels):
    """Whether `labels` (a pod's) meet `selector`; an empty selector meets
    every pod, as Kubernetes reads it."""
    for k, v in ((selector or {}).get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in (selector or {}).get("matchExpressions") or []:
        op, have = e["operator"], labels.get(e["key"])
        if op == "In" and have not in e["values"]:
            return False
        if op == "NotIn" and have in e["values"]:
            return False
        if op == "Exists" and have is None:
            return False
        if op == "DoesNotExist" and have is not None:
            return False
    return True
