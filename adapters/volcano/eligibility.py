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
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from adapters.volcano.kube import NotOurs
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


def selector_matches(selector: Any, labels: Mapping[str, str]) -> bool:
    """A ``metav1.LabelSelector`` against pod labels: ``matchLabels`` and ``matchExpressions``
    (``In``, ``NotIn``, ``Exists``, ``DoesNotExist``) AND-ed; an empty selector matches every pod,
    a missing one none (Kubernetes' pod-affinity semantics)."""
    if not isinstance(selector, dict):
        return False
    wanted = selector.get("matchLabels") if isinstance(selector.get("matchLabels"), dict) else {}
    if any(labels.get(str(k)) != str(v) for k, v in wanted.items()):
        return False
    return all(
        _requirement(e, labels.get(str(e.get("key"))))
        for e in _list(selector.get("matchExpressions"))
        if isinstance(e, dict)
    )


def _pod_affinity_terms(affinity: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    pod = affinity.get("podAffinity")
    terms = pod.get("requiredDuringSchedulingIgnoredDuringExecution") if isinstance(pod, dict) else None
    return [t for t in _list(terms) if isinstance(t, dict)]


def _anti_terms(affinity: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    anti = affinity.get("podAntiAffinity")
    terms = anti.get("requiredDuringSchedulingIgnoredDuringExecution") if isinstance(anti, dict) else None
    return [t for t in _list(terms) if isinstance(t, dict)]


def preferred_terms(affinity: Mapping[str, Any]) -> list[tuple[int, Mapping[str, Any]]]:
    """(weight, NodeSelectorTerm) of the pod's preferred node affinity."""
    node = affinity.get("nodeAffinity")
    listed = node.get("preferredDuringSchedulingIgnoredDuringExecution") if isinstance(node, dict) else None
    out = []
    for item in _list(listed):
        if isinstance(item, dict) and isinstance(item.get("weight"), int) and item["weight"] > 0:
            out.append((item["weight"], item.get("preference")))
    return out


class Eligibility:
    """The eligible-node labels of one session's tasks, and the nodes their preferred node affinity
    favours."""

    def __init__(self, nodes: Sequence[NodeInfo]) -> None:
        self._nodes = [(n.name, n.labels, _hard_taints(n.node)) for n in nodes]
        # Running pods, for required pod affinity: (node, namespace, pod labels).
        self._pods = [(n.name, t.namespace, t.labels) for n in nodes for t in n.tasks if t.holding]
        # Running pods' own required anti-affinity: (node, namespaces, term); it keeps a new pod it
        # matches out of that pod's topology domain (Kubernetes checks existing pods' terms too).
        self._repelling = [
            (n.name, [str(x) for x in _list(term.get("namespaces"))] or [t.namespace], term)
            for n in nodes
            for t in n.tasks
            if t.holding
            for term in _anti_terms(_rules(t)[1])
        ]
        self._node_labels = {n.name: n.labels for n in nodes}
        self._by_spec: dict[str, str] = {}  # tolerations+affinity (JSON) → label ("" = every node)
        self._by_nodes: dict[frozenset[str], str] = {}  # eligible set → label
        self.labels: dict[str, dict[str, str]] = {}  # node → the labels to add
        self.preference: Counter[str] = Counter()  # node → preferred-affinity weight of the tasks

    def prefer(self, task: Task) -> None:
        """Add ``task``'s preferred node affinity to the nodes' weights (Kubernetes' NodeAffinity
        score: the weights of the preferred terms a node matches)."""
        terms = preferred_terms(_rules(task)[1])
        for name, labels, _ in self._nodes if terms else ():
            weight = sum(w for w, term in terms if _term(term, labels, name))
            if weight:
                self.preference[name] += weight

    def _pod_affinity_allows(self, task: Task, terms: list[Mapping[str, Any]]) -> frozenset[str] | None:
        """The nodes the pod's required pod affinity admits (None: no term, every node).

        Each term: the topology domains (``topologyKey`` values) of nodes running a pod its
        ``labelSelector`` matches in its ``namespaces`` (default: the pod's own); the pod may go to
        a node in any of them, every term holding. A term no running pod matches but the pod itself
        does is Kubernetes' "first pod of a group" case: the group's placement among itself is not
        a node set, so the pod is left to Volcano (:class:`NotOurs`); a term matching nothing
        admits no node. A ``namespaceSelector`` needs namespace labels Volcano does not send: left
        to Volcano too."""
        if not terms:
            return None
        allowed: set[str] = {name for name, _, _ in self._nodes}
        for term in terms:
            key = str(term.get("topologyKey") or "")
            spaces = [str(n) for n in _list(term.get("namespaces"))] or [task.namespace]
            if term.get("namespaceSelector") is not None or not key:
                raise NotOurs(
                    "a required podAffinity term with a namespaceSelector or no topologyKey is not "
                    "modelled; left to Volcano"
                )
            selector = term.get("labelSelector")
            domains = {
                self._node_labels[node].get(key)
                for node, namespace, labels in self._pods
                if namespace in spaces and selector_matches(selector, labels)
            } - {None}
            if not domains:
                if task.namespace in spaces and selector_matches(selector, task.labels):
                    raise NotOurs(
                        "required podAffinity to pods of its own group, none running yet: where the "
                        "group goes together is not a node set; left to Volcano"
                    )
                return frozenset()
            allowed &= {name for name, labels, _ in self._nodes if labels.get(key) in domains}
        return frozenset(allowed)

    def _repelled(self, task: Task) -> set[str]:
        """Nodes a running pod's required anti-affinity keeps ``task`` off: those sharing the
        running pod's node's ``topologyKey`` value, where the term's selector matches ``task`` in
        its namespaces (a ``namespaceSelector`` term is read as matching: keeping away is safe)."""
        out: set[str] = set()
        for node, spaces, term in self._repelling:
            key = str(term.get("topologyKey") or "")
            domain = self._node_labels[node].get(key)
            in_space = term.get("namespaceSelector") is not None or task.namespace in spaces
            if domain is None or not in_space or not selector_matches(term.get("labelSelector"), task.labels):
                continue
            out |= {name for name, labels, _ in self._nodes if labels.get(key) == domain}
        return out

    def selector(self, task: Task, avoid: frozenset[str] = frozenset()) -> dict[str, str]:
        """The node-selector entry that keeps ``task`` on nodes its taints, node affinity and
        required pod affinity allow, less ``avoid`` (nodes Volcano's predicates refused its job in an
        earlier session for a reason not modelled here); {} if every node is allowed."""
        tolerations, affinity = _rules(task)
        pod_terms = _pod_affinity_terms(affinity)
        # The pod's namespace and labels decide a pod-affinity term's answer too.
        by_pod = bool(pod_terms or self._repelling)
        spec = json.dumps(
            [
                tolerations,
                affinity,
                task.namespace if by_pod else "",
                task.labels if by_pod else {},
                sorted(avoid),
            ],
            sort_keys=True,
        )
        label = self._by_spec.get(spec)
        if label is None:
            by_pods = self._pod_affinity_allows(task, pod_terms)
            repelled = self._repelled(task) if self._repelling else set()
            eligible = frozenset(
                name
                for name, labels, taints in self._nodes
                if all(tolerates(tolerations, t) for t in taints)
                and affinity_allows(affinity, labels, name)
                and (by_pods is None or name in by_pods)
                and name not in repelled
                and name not in avoid
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
