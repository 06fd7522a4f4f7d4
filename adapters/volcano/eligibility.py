"""Which nodes a pod may use by the rules Volcano's ``predicates`` plugin enforces besides labels:
taints against tolerations (Kubernetes' TaintToleration filter: ``NoSchedule`` and ``NoExecute``;
``PreferNoSchedule`` only scores) and required node affinity (NodeAffinity filter:
``nodeSelectorTerms`` OR-ed, each term's ``matchExpressions`` and ``matchFields`` AND-ed). A plan
that ignored them would pin a task to a node Volcano refuses, every session.

The solver knows nodes by labels, so each distinct set of eligible nodes becomes a label the batch
adds to those nodes (``topoplace.io/eligible-N: "true"``, in the request only, never on the cluster)
and to the pods' node selector. Pods are grouped by their tolerations and affinity first: a session
of 200 tasks has a handful of distinct specs, so 1,000 nodes are checked a handful of times.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from adapters.volcano.wire import NodeInfo, Task

LABEL_PREFIX = "topoplace.io/eligible-"
HARD_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


def tolerates(tolerations: Sequence[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """Kubernetes' ``ToleratesTaint`` for any of ``tolerations``."""
    for t in tolerations:
        effect = t.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        operator = t.get("operator") or "Equal"
        key = t.get("key") or ""
        if operator == "Exists":
            if not key or key == taint.get("key"):
                return True
        elif (
            operator == "Equal"
            and key == taint.get("key")
            and (t.get("value") or "") == (taint.get("value") or "")
        ):
            return True
    return False


def _requirement(expr: Mapping[str, Any], value: str | None) -> bool:
    """One ``NodeSelectorRequirement`` against a label (or field) value, None when absent."""
    operator, values = expr.get("operator"), [str(v) for v in _list(expr.get("values"))]
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            have, want = int(value), int(values[0])
        except ValueError:
            return False
        return have > want if operator == "Gt" else have < want
    return False  # an operator Kubernetes would reject: the term selects nothing


def _term(term: Any, labels: Mapping[str, str], name: str) -> bool:
    if not isinstance(term, dict):
        return False
    exprs = [e for e in _list(term.get("matchExpressions")) if isinstance(e, dict)]
    fields = [f for f in _list(term.get("matchFields")) if isinstance(f, dict)]
    if not exprs and not fields:
        return False  # an empty term matches no node (Kubernetes' NodeSelectorTerm semantics)
    fields_ok = all(_requirement(f, name if f.get("key") == "metadata.name" else None) for f in fields)
    return fields_ok and all(_requirement(e, labels.get(str(e.get("key")))) for e in exprs)


def affinity_allows(affinity: Mapping[str, Any], labels: Mapping[str, str], name: str) -> bool:
    """The pod's required node affinity admits the node (no requirement admits every node)."""
    node = affinity.get("nodeAffinity")
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution") if isinstance(node, dict) else None
    terms = _list(required.get("nodeSelectorTerms")) if isinstance(required, dict) else []
    if not terms:
        return True
    return any(_term(t, labels, name) for t in terms)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _hard_taints(node: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = node.get("spec") if isinstance(node.get("spec"), dict) else {}
    taints = spec.get("taints") if isinstance(spec.get("taints"), list) else []
    return [t for t in taints if isinstance(t, dict) and t.get("effect") in HARD_EFFECTS]


def _rules(task: Task) -> tuple[list[Mapping[str, Any]], Mapping[str, Any]]:
    spec = task.pod.get("spec") if isinstance(task.pod.get("spec"), dict) else {}
    listed = spec.get("tolerations") if isinstance(spec.get("tolerations"), list) else []
    tolerations = [t for t in listed if isinstance(t, dict)]
    affinity = spec.get("affinity") if isinstance(spec.get("affinity"), dict) else {}
    return tolerations, affinity


class Eligibility:
    """The eligible-node labels of one session's tasks."""

    def __init__(self, nodes: Sequence[NodeInfo]) -> None:
        self._nodes = [(n.name, n.labels, _hard_taints(n.node)) for n in nodes]
        self._by_spec: dict[str, str] = {}  # tolerations+affinity (JSON) → label ("" = every node)
        self._by_nodes: dict[frozenset[str], str] = {}  # eligible set → label
        self.labels: dict[str, dict[str, str]] = {}  # node → the labels to add

    def selector(self, task: Task) -> dict[str, str]:
        """The node-selector entry that keeps ``task`` on nodes its taints and affinity allow ({} if
        every node is allowed)."""
        tolerations, affinity = _rules(task)
        spec = json.dumps([tolerations, affinity], sort_keys=True)
        label = self._by_spec.get(spec)
        if label is None:
            eligible = frozenset(
                name
                for name, labels, taints in self._nodes
                if all(tolerates(tolerations, t) for t in taints) and affinity_allows(affinity, labels, name)
            )
            if len(eligible) == len(self._nodes):
                label = ""
            else:
                label = self._by_nodes.get(eligible, "")
                if not label:
                    label = f"{LABEL_PREFIX}{len(self._by_nodes)}"
                    self._by_nodes[eligible] = label
                    for name in eligible:
                        self.labels.setdefault(name, {})[label] = "true"
            self._by_spec[spec] = label
        return {label: "true"} if label else {}
