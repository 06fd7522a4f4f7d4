"""Kubernetes objects as ``kubectl get -o json|yaml`` prints them, and what the node list says.

One file may hold a ``List`` (``kubectl get nodes -o json``), one object, several YAML documents or a
bare list of objects; :func:`load_objects` flattens them to ``(where, object)`` pairs, ``where`` being
the path a person finds the object by (``nodes.json:items[3]``).

The node list gives three sources, kept apart so that the assembly can rank and report them:

* the nodes themselves (name, labels, allocatable CPU and memory, ``nvidia.com/gpu`` count,
  ``spec.unschedulable``) — a node list *defines* the cluster;
* GPU Feature Discovery's ``nvidia.com/gpu.clique`` label, ``<ClusterUUID>.<CliqueId>``: the NVLink
  partition the node's GPUs belong to (set once Fabric Manager has registered them);
* NVIDIA topograph's labels: ``network.topology.nvidia.com/accelerator`` (the NVLink domain) and
  ``.../leaf``, ``.../spine``, ``.../core`` (switch ids, tier 1 to 3), or topograph 1.x's
  ``accelerator.topograph.run/domain`` and ``fabric.topograph.run/tier-N`` (tier 0 nearest the node).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from solver.domain.errors import InvalidRequest, Problem
from solver.domain.model import FabricSwitch
from solver.ingest.files import _read_text
from solver.ingest.parts import NodeFacts, Parts, text_of

CLIQUE_LABEL = "nvidia.com/gpu.clique"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
HOSTNAME_LABEL = "kubernetes.io/hostname"
TOPOGRAPH_ACCELERATOR = ("network.topology.nvidia.com/accelerator", "accelerator.topograph.run/domain")
TOPOGRAPH_TIERS = (  # tier 1, 2, 3
    "network.topology.nvidia.com/leaf",
    "network.topology.nvidia.com/spine",
    "network.topology.nvidia.com/core",
)
_TOPOGRAPH_FABRIC = re.compile(r"^fabric\.topograph\.run/tier-(\d+)$")
# Labels that name an NVLink domain rather than a network switch (a Topology level may use them).
NVLINK_LABELS = (CLIQUE_LABEL, *TOPOGRAPH_ACCELERATOR)


def nvlink_domain_of(labels: Mapping[str, str]) -> str:
    """The NVLink domain a node's labels name: GFD's clique, else topograph's accelerator label; ""
    when none does. For readers that see only labels (the Volcano adapter's session nodes)."""
    return next((labels[key] for key in NVLINK_LABELS if labels.get(key)), "")


# --------------------------------------------------------------------------- loading


def load_objects(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """Every Kubernetes object in the file, with where it is; lists are flattened."""
    text = _read_text(path)
    source = str(path)
    try:
        if path.suffix.lower() == ".json":
            documents = [json.loads(text)]
        else:
            documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except (json.JSONDecodeError, yaml.YAMLError) as err:
        mark = getattr(err, "problem_mark", None)
        line = getattr(err, "lineno", None) or (mark.line + 1 if mark else None)
        where = f"{source}:{line}" if line else source
        raise InvalidRequest([Problem(path=where, message=f"not JSON/YAML: {err}")]) from None
    found: list[tuple[str, dict[str, Any]]] = []
    problems: list[Problem] = []
    for d, document in enumerate(documents):
        single = len(documents) == 1
        prefix = f"{source}:" if single else f"{source}:document[{d}]."
        if isinstance(document, dict) and isinstance(document.get("items"), list):
            items, base = document["items"], f"{prefix}items"
        elif isinstance(document, list):
            items, base = document, prefix
        elif isinstance(document, dict):
            found.append((source if single else f"{source}:document[{d}]", document))
            continue
        else:
            problems.append(Problem(path=prefix.rstrip(":."), message="expected a Kubernetes object or List"))
            continue
        for i, item in enumerate(items):
            where = f"{base}[{i}]"
            if isinstance(item, dict):
                found.append((where, item))
            else:
                problems.append(Problem(path=where, message="expected a Kubernetes object (a mapping)"))
    if problems:
        raise InvalidRequest(problems)
    return found


def of_kind(objects: list[tuple[str, dict[str, Any]]], kinds: set[str]) -> list[tuple[str, dict[str, Any]]]:
    return [(where, obj) for where, obj in objects if obj.get("kind") in kinds]


_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")
_FACTOR = {
    None: 1,
    "m": 0.001,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


def quantity(value: Any) -> float | None:
    """A Kubernetes resource quantity (``144``, ``143500m``, ``983040Mi``, ``1.5Ti``); None if not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    match = _QUANTITY.match(str(value).strip()) if isinstance(value, str) else None
    if match is None:
        return None
    return float(match[1]) * _FACTOR[match[2]]


def labels_of(obj: dict[str, Any]) -> dict[str, str]:
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    raw = metadata.get("labels") if isinstance(metadata.get("labels"), dict) else {}
    return {str(k): v for k, v in ((k, text_of(v)) for k, v in raw.items()) if v is not None}


def name_of(obj: dict[str, Any]) -> str:
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return name if isinstance(name, str) else ""


# --------------------------------------------------------------------------- the node list


def read_nodes(path: Path) -> list[Parts]:
    """The node list at ``path`` as three sources: the nodes, GFD's clique labels, topograph's labels."""
    objects = load_objects(path)
    nodes = of_kind(objects, {"Node"})
    problems: list[Problem] = []
    for where, obj in objects:
        if obj.get("kind") != "Node":
            problems.append(Problem(path=f"{where}.kind", message=f"expected Node, got {obj.get('kind')!r}"))
    source = str(path)
    facts: dict[str, NodeFacts] = {}
    cliques: dict[str, NodeFacts] = {}
    seen: dict[str, str] = {}
    for where, obj in nodes:
        name = name_of(obj)
        if not name:
            problems.append(Problem(path=f"{where}.metadata.name", message="required: the node's name"))
            continue
        if name in seen:
            problems.append(
                Problem(path=f"{where}.metadata.name", message=f"node {name} also at {seen[name]}")
            )
            continue
        seen[name] = where
        labels = labels_of(obj)
        status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
        sized = status.get("allocatable") or status.get("capacity") or {}
        capacity = status.get("capacity") or sized
        cpu = quantity(sized.get("cpu")) if isinstance(sized, dict) else None
        memory = quantity(sized.get("memory")) if isinstance(sized, dict) else None
        gpus = quantity(capacity.get("nvidia.com/gpu")) if isinstance(capacity, dict) else None
        for key, value in (("cpu", cpu), ("memory", memory)):
            if isinstance(sized, dict) and key in sized and value is None:
                message = f"not a Kubernetes quantity: {sized[key]!r}"
                problems.append(Problem(path=f"{where}.status.allocatable.{key}", message=message))
        spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
        facts[name] = NodeFacts(
            where=where,
            labels=labels,
            cpu_milli=round(cpu * 1000) if cpu is not None else None,
            memory_mib=int(memory // 2**20) if memory is not None else None,
            gpu_count=int(gpus) if gpus is not None else None,
            gpu_model=labels.get(GPU_PRODUCT_LABEL),
            schedulable=not bool(spec.get("unschedulable", False)),
        )
        if labels.get(CLIQUE_LABEL):
            cliques[name] = NodeFacts(
                where=where, nvlink_domain=labels[CLIQUE_LABEL], nvlink_field=f"label {CLIQUE_LABEL}"
            )
    topograph = _topograph(nodes, problems)
    if problems:
        raise InvalidRequest(problems)
    parts = [Parts(source=source, kind="kubernetes nodes", nodes=facts, defines_nodes=True)]
    if cliques:
        parts.append(Parts(source=source, kind="GPU Feature Discovery labels", nodes=cliques))
    if topograph.nodes:
        parts.append(topograph)
    return parts


def _topograph(nodes: list[tuple[str, dict[str, Any]]], problems: list[Problem]) -> Parts:
    """Topograph's labels: switch ids are the label values (topograph names real switches)."""
    facts: dict[str, NodeFacts] = {}
    parent: dict[str, tuple[str, str]] = {}  # switch → (its parent, where that was said)
    tier_of: dict[str, int] = {}
    source = ""
    for where, obj in nodes:
        source = where.split(":", 1)[0]
        name, labels = name_of(obj), labels_of(obj)
        tiers = _topograph_tiers(labels)
        domain_key = next((k for k in TOPOGRAPH_ACCELERATOR if labels.get(k)), "")
        if not tiers and not domain_key:
            continue
        path: list[str] = []
        for tier in range(1, max(tiers, default=0) + 1):
            value = tiers.get(tier, ("", ""))[1]
            if not value:
                above = tiers[max(tiers)][0]
                problems.append(
                    Problem(
                        path=f"{where}.metadata.labels",
                        message=f"node {name} has {above} but no tier-{tier} switch label",
                    )
                )
                break
            path.append(value)
        for lower, upper in itertools.pairwise(path):
            known = parent.setdefault(lower, (upper, where))
            if known[0] != upper:
                problems.append(
                    Problem(
                        path=f"{where}.metadata.labels",
                        message=f"switch {lower} is under {upper} here but under {known[0]} at {known[1]}",
                    )
                )
        for tier, switch in enumerate(path, start=1):
            if tier_of.setdefault(switch, tier) != tier:
                message = f"switch {switch} is tier {tier} here and tier {tier_of[switch]} on another node"
                problems.append(Problem(path=f"{where}.metadata.labels", message=message))
        facts[name] = NodeFacts(
            where=where,
            path=tuple(path) if path else None,
            nvlink_domain=labels.get(domain_key) if domain_key else None,
            nvlink_field=f"label {domain_key}" if domain_key else "",
        )
    switches = {
        s: FabricSwitch(id=s, tier=t, parent=parent.get(s, ("", ""))[0]) for s, t in sorted(tier_of.items())
    }
    return Parts(source=source, kind="topograph labels", nodes=facts, switches=switches)


def _topograph_tiers(labels: dict[str, str]) -> dict[int, tuple[str, str]]:
    """Tier (1 = leaf) → (label key, switch id), from either label family."""
    tiers = {t: (key, labels[key]) for t, key in enumerate(TOPOGRAPH_TIERS, start=1) if labels.get(key)}
    for key, value in labels.items():
        match = _TOPOGRAPH_FABRIC.match(key)
        if match and value:
            tiers.setdefault(int(match[1]) + 1, (key, value))
    return tiers
