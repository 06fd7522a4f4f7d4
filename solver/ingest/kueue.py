"""Kueue's and KAI's ``Topology`` objects plus the node list's labels, as fabric switch tiers.

Both schedulers describe the data centre as an ordered list of node labels, widest first::

    apiVersion: kueue.x-k8s.io/v1beta1        # or v1alpha1; KAI: kai.scheduler/v1alpha1
    kind: Topology
    metadata: {name: default}
    spec:
      levels:
      - nodeLabel: cloud.provider.com/topology-block
      - nodeLabel: cloud.provider.com/topology-rack
      - nodeLabel: kubernetes.io/hostname

The narrowest level above the node becomes tier 1 (the leaf), the next tier 2, and so on; a
``kubernetes.io/hostname`` level is the node itself and must come last. Kueue does not require a
level's values to be unique across the cluster (rack ``r1`` may exist in two blocks), so a domain is
the values from the widest level down; a switch keeps the bare value as its id unless two domains
would share it, and is then named by its whole path (``b2/r1``). A level whose label names an NVLink
domain (``nvidia.com/gpu.clique``, topograph's accelerator label) is a tier *and* sets the node's
NVLink domain.

A node with some of the levels' labels but not all is an error naming the node and the missing
label; a node with none is outside this topology (listed in the report).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

from solver.domain.errors import InvalidRequest, Problem
from solver.domain.model import FabricSwitch
from solver.ingest.kube import HOSTNAME_LABEL, NVLINK_LABELS, load_objects, name_of
from solver.ingest.parts import NodeFacts, Parts

API_VERSIONS = {
    "kueue.x-k8s.io/v1alpha1",
    "kueue.x-k8s.io/v1beta1",
    "kueue.x-k8s.io/v1beta2",
    "kai.scheduler/v1alpha1",
}


def read_topology(
    path: Path, node_labels: Mapping[str, tuple[str, Mapping[str, str]]], name: str = ""
) -> Parts:
    """The ``Topology`` at ``path`` (the one called ``name`` if the file holds several) applied to
    ``node_labels`` (node → (where, labels), from the node list)."""
    objects = [(w, o) for w, o in load_objects(path) if o.get("kind") == "Topology"]
    if name:
        objects = [(w, o) for w, o in objects if name_of(o) == name]
    if len(objects) != 1:
        names = ", ".join(name_of(o) or "?" for _, o in load_objects(path) if o.get("kind") == "Topology")
        wanted = f"a Topology named {name!r}" if name else "exactly one Topology (or give its name)"
        raise InvalidRequest(
            [Problem(path=str(path), message=f"expected {wanted}; found: {names or 'none'}")]
        )
    where, topology = objects[0]
    problems: list[Problem] = []
    if topology.get("apiVersion") not in API_VERSIONS:
        message = (
            f"unknown apiVersion {topology.get('apiVersion')!r}; known: {', '.join(sorted(API_VERSIONS))}"
        )
        problems.append(Problem(path=f"{where}.apiVersion", message=message))
    levels = _levels(topology, where, problems)
    if problems:
        raise InvalidRequest(problems)
    kind = "KAI topology" if str(topology.get("apiVersion")).startswith("kai.") else "Kueue topology"
    return _apply(levels, node_labels, f"{path}:Topology/{name_of(topology)}", kind, where)


def _levels(topology: dict, where: str, problems: list[Problem]) -> list[str]:
    spec = topology.get("spec") if isinstance(topology.get("spec"), dict) else {}
    raw = spec.get("levels")
    if not isinstance(raw, list) or not raw:
        problems.append(Problem(path=f"{where}.spec.levels", message="required: a non-empty list of levels"))
        return []
    levels: list[str] = []
    for i, level in enumerate(raw):
        label = level.get("nodeLabel") if isinstance(level, dict) else None
        if not isinstance(label, str) or not label:
            problems.append(
                Problem(path=f"{where}.spec.levels[{i}].nodeLabel", message="required: a node label")
            )
        elif label in levels:
            message = f"{label} is already level {levels.index(label)}"
            problems.append(Problem(path=f"{where}.spec.levels[{i}].nodeLabel", message=message))
        elif label == HOSTNAME_LABEL and i != len(raw) - 1:
            message = f"{HOSTNAME_LABEL} is the node itself and must be the last level"
            problems.append(Problem(path=f"{where}.spec.levels[{i}].nodeLabel", message=message))
        levels.append(label if isinstance(label, str) else "")
    return levels


def _apply(
    levels: list[str],
    node_labels: Mapping[str, tuple[str, Mapping[str, str]]],
    source: str,
    kind: str,
    where: str,
) -> Parts:
    switch_levels = [label for label in levels if label != HOSTNAME_LABEL]
    problems: list[Problem] = []
    keys: dict[str, tuple[str, ...]] = {}  # node → its values, widest first
    outside: list[str] = []
    for node, (node_where, labels) in node_labels.items():
        values = tuple(labels.get(label, "") for label in switch_levels)
        if not any(values):
            outside.append(node)
            continue
        missing = [label for label, value in zip(switch_levels, values, strict=True) if not value]
        if missing:
            have = next(label for label, value in zip(switch_levels, values, strict=True) if value)
            message = f"node {node} has {have} but not {', '.join(missing)} (levels of {source})"
            problems.append(Problem(path=f"{node_where}.metadata.labels", message=message))
            continue
        keys[node] = values
    if problems:
        raise InvalidRequest(problems)
    ids = _switch_ids({values[: depth + 1] for values in keys.values() for depth in range(len(values))})
    tiers = len(switch_levels)
    switches = {
        ids[key]: FabricSwitch(
            id=ids[key], tier=tiers - len(key) + 1, parent=ids[key[:-1]] if len(key) > 1 else ""
        )
        for key in sorted(ids, key=lambda k: (len(k), k))
    }
    nvlink_level = next((i for i, label in enumerate(switch_levels) if label in NVLINK_LABELS), None)
    facts = {
        node: NodeFacts(
            where=node_labels[node][0],
            path=tuple(ids[values[: depth + 1]] for depth in reversed(range(len(values)))),
            nvlink_domain=values[nvlink_level] if nvlink_level is not None else None,
            nvlink_field=f"{where} level {switch_levels[nvlink_level]}" if nvlink_level is not None else "",
        )
        for node, values in keys.items()
    }
    notes = (
        (f"{len(outside)} nodes carry none of its levels: outside it ({', '.join(sorted(outside)[:5])}...)",)
        if outside
        else ()
    )
    return Parts(source=source, kind=kind, nodes=facts, switches=switches, notes=notes)


def _switch_ids(keys: set[tuple[str, ...]]) -> dict[tuple[str, ...], str]:
    """A domain's id: its own value when no other domain has it, else its whole path."""
    users: dict[str, list[tuple[str, ...]]] = defaultdict(list)
    for key in keys:
        users[key[-1]].append(key)
    return {key: key[-1] if len(users[key[-1]]) == 1 else "/".join(key) for key in keys}
