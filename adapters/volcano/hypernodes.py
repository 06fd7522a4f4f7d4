"""Volcano ``HyperNode`` objects (``topology.volcano.sh/v1alpha1``) → the solver's fabric switches.

A HyperNode is a switch: ``spec.tier`` (the lowest = closest to the nodes; the CRD allows 0), members
that are nodes or other HyperNodes, each chosen by ``exactMatch`` (a name), ``regexMatch`` (a pattern
over names) or ``labelMatch`` (a label selector; nodes only). As in Volcano's scheduler
(``pkg/util/hypernode/member_selector.go``, ``api/hyper_node_info.go``): an empty ``labelMatch`` selects
no node, and a HyperNode member is found by ``exactMatch`` only (a ``regexMatch`` one is ignored).
The adapter reads them from YAML or JSON files (one object, several ``---`` documents, or a
``List``), or from a directory of such files, and resolves the members against the session's nodes
every session — labels and node sets change.

A node's leaf is the lowest-tier HyperNode holding it; a HyperNode's parent is the HyperNode that
lists it as a member. Conflicts (a node in two HyperNodes of its lowest tier, a HyperNode with two
parents) keep the first by name and are reported, never fatal: one wrong object must not stop a
cluster from scheduling.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from solver.domain.errors import InvalidRequest, Problem
from solver.domain.model import FabricSwitch

API_VERSION = "topology.volcano.sh/v1alpha1"
SUFFIXES = (".yaml", ".yml", ".json")


@dataclass(frozen=True)
class Selector:
    exact: str | None = None
    regex: re.Pattern[str] | None = None
    labels: Mapping[str, str] | None = None
    expressions: tuple[tuple[str, str, tuple[str, ...]], ...] = ()

    def matches(self, name: str, labels: Mapping[str, str] | None = None) -> bool:
        if self.exact is not None:
            return name == self.exact
        if self.regex is not None:
            return self.regex.search(name) is not None
        if labels is None or not (self.labels or self.expressions):
            return False  # an empty labelMatch selects nothing (Volcano's GetMembers)
        return all(labels.get(k) == v for k, v in (self.labels or {}).items()) and all(
            _expression(labels, key, op, values) for key, op, values in self.expressions
        )


def _expression(labels: Mapping[str, str], key: str, op: str, values: tuple[str, ...]) -> bool:
    if op == "In":
        return labels.get(key) in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    return key not in labels  # DoesNotExist


@dataclass(frozen=True)
class Member:
    kind: str  # "Node" | "HyperNode"
    selector: Selector


@dataclass(frozen=True)
class HyperNode:
    name: str
    tier: int
    tier_name: str
    members: tuple[Member, ...]


# --------------------------------------------------------------------------- loading


def load(path: Path) -> tuple[HyperNode, ...]:
    """Every HyperNode in ``path`` (a file or a directory of ``*.yaml|*.yml|*.json``), by name.

    Raises :class:`InvalidRequest` with one problem per fault, located as ``FILE: doc[i].field``.
    """
    files = sorted(p for p in path.iterdir() if p.suffix in SUFFIXES) if path.is_dir() else [path]
    problems: list[Problem] = []
    found: dict[str, HyperNode] = {}
    for file in files:
        try:
            text = file.read_text()
        except OSError as err:
            problems.append(Problem(path=str(file), message=f"cannot read: {err.strerror}"))
            continue
        for where, obj in _objects(text, str(file), problems):
            hypernode = parse(obj, where, problems)
            if hypernode is None:
                continue
            if hypernode.name in found:
                problems.append(Problem(path=where, message=f"HyperNode {hypernode.name!r} is defined twice"))
                continue
            found[hypernode.name] = hypernode
    if problems:
        raise InvalidRequest(problems)
    return tuple(found[n] for n in sorted(found))


def _objects(text: str, source: str, problems: list[Problem]) -> Iterator[tuple[str, Any]]:
    try:
        docs = [json.loads(text)] if source.endswith(".json") else list(yaml.safe_load_all(text))
    except (json.JSONDecodeError, yaml.YAMLError) as err:
        problems.append(
            Problem(path=source, message=f"not valid {'JSON' if source.endswith('.json') else 'YAML'}: {err}")
        )
        return
    for i, doc in enumerate(d for d in docs if d is not None):
        if isinstance(doc, dict) and isinstance(doc.get("items"), list):  # a List / HyperNodeList
            for j, item in enumerate(doc["items"]):
                yield f"{source}: doc[{i}].items[{j}]", item
        else:
            yield f"{source}: doc[{i}]", doc


def parse(obj: Any, where: str, problems: list[Problem]) -> HyperNode | None:
    """One HyperNode object, or None with the reasons appended to ``problems``."""
    if not isinstance(obj, dict):
        problems.append(Problem(path=where, message="expected a HyperNode object"))
        return None
    if obj.get("kind") != "HyperNode" or obj.get("apiVersion") != API_VERSION:
        problems.append(
            Problem(
                path=where,
                message=f"expected kind HyperNode, apiVersion {API_VERSION}, got "
                f"{obj.get('kind')!r}, {obj.get('apiVersion')!r}",
            )
        )
        return None
    name = (obj.get("metadata") or {}).get("name")
    spec = obj.get("spec")
    if not isinstance(name, str) or not name:
        problems.append(Problem(path=f"{where}.metadata.name", message="a HyperNode needs a name"))
        return None
    if not isinstance(spec, dict):
        problems.append(Problem(path=f"{where}.spec", message="a HyperNode needs a spec"))
        return None
    tier = _tier(spec.get("tier"), f"{where}.spec.tier", problems)
    members = [
        _member(m, f"{where}.spec.members[{k}]", problems) for k, m in enumerate(spec.get("members") or [])
    ]
    if tier is None or any(m is None for m in members):
        return None
    return HyperNode(
        name=name,
        tier=tier,
        tier_name=str(spec.get("tierName") or ""),
        members=tuple(m for m in members if m is not None),
    )


def _tier(value: Any, where: str, problems: list[Problem]) -> int | None:
    """``spec.tier``: an int (v1.12+); the first API version had a string holding one. The CRD's
    minimum is 0."""
    try:
        tier = int(value) if isinstance(value, int | str) and not isinstance(value, bool) else None
    except ValueError:
        tier = None
    if tier is None or tier < 0:
        problems.append(Problem(path=where, message=f"expected a tier ≥ 0, got {value!r}"))
        return None
    return tier


def _member(value: Any, where: str, problems: list[Problem]) -> Member | None:
    if not isinstance(value, dict):
        problems.append(Problem(path=where, message="expected a member object"))
        return None
    kind = value.get("type")
    if kind not in ("Node", "HyperNode"):
        problems.append(Problem(path=f"{where}.type", message=f"expected Node or HyperNode, got {kind!r}"))
        return None
    selector = value.get("selector") or {}
    chosen = [k for k in ("exactMatch", "regexMatch", "labelMatch") if selector.get(k) is not None]
    if len(chosen) != 1:
        problems.append(
            Problem(
                path=f"{where}.selector",
                message="exactly one of exactMatch, regexMatch, labelMatch must be set",
            )
        )
        return None
    how = chosen[0]
    body = selector[how]
    if how == "exactMatch":
        return Member(kind, Selector(exact=str(body.get("name") or "")))
    if how == "regexMatch":
        try:
            return Member(kind, Selector(regex=re.compile(str(body.get("pattern") or ""))))
        except re.error as err:
            problems.append(
                Problem(path=f"{where}.selector.regexMatch.pattern", message=f"bad pattern: {err}")
            )
            return None
    if kind != "Node":
        problems.append(Problem(path=f"{where}.selector.labelMatch", message="labelMatch selects nodes only"))
        return None
    expressions = tuple(
        (str(e.get("key")), str(e.get("operator")), tuple(str(v) for v in e.get("values") or ()))
        for e in body.get("matchExpressions") or ()
    )
    return Member(kind, Selector(labels=dict(body.get("matchLabels") or {}), expressions=expressions))


# --------------------------------------------------------------------------- resolution


@dataclass(frozen=True)
class HyperNodeTree:
    """The HyperNodes resolved against one session's nodes."""

    switches: tuple[FabricSwitch, ...] = ()
    leaf_of: Mapping[str, str] = field(default_factory=dict)  # node → its lowest HyperNode
    tier_names: Mapping[str, int] = field(default_factory=dict)  # Volcano's tier numbers
    warnings: tuple[str, ...] = ()
    tier_offset: int = 0  # solver tier = Volcano tier + offset (1 where Volcano's tiers start at 0)
    own_leaves: frozenset[str] = frozenset()  # switches made for nodes held by no lowest-tier HyperNode

    def ancestors(self, switch: str) -> list[str]:
        parent = {s.id: s.parent for s in self.switches}
        chain: list[str] = []
        while switch and switch not in chain:
            chain.append(switch)
            switch = parent.get(switch, "")
        return chain

    def lowest_common(self, nodes: Iterable[str]) -> str:
        """The lowest HyperNode above every node given; "" if they share none."""
        chains = [self.ancestors(self.leaf_of.get(n, "")) for n in set(nodes)]
        if not chains or any(not c for c in chains):
            return ""
        shared = set(chains[0]).intersection(*map(set, chains[1:]))
        return next((s for s in chains[0] if s in shared and s not in self.own_leaves), "")


def resolve(hypernodes: Iterable[HyperNode], node_labels: Mapping[str, Mapping[str, str]]) -> HyperNodeTree:
    """Switches with parents, and each node's leaf, for the nodes of this session."""
    nodes = sorted(hypernodes, key=lambda h: h.name)
    by_name = {h.name: h for h in nodes}
    warnings: list[str] = []
    parent: dict[str, str] = {}
    leaf_of: dict[str, str] = {}
    for h in nodes:
        for member in h.members:
            if member.kind == "HyperNode" and member.selector.exact is None:
                warnings.append(
                    f"HyperNode {h.name}: a HyperNode member not chosen by exactMatch is ignored, "
                    "as in Volcano"
                )
            elif member.kind == "HyperNode":
                for child in (c for c in by_name if c != h.name and member.selector.matches(c)):
                    if child in parent and parent[child] != h.name:
                        warnings.append(
                            f"HyperNode {child} has two parents ({parent[child]}, {h.name}); "
                            f"kept {parent[child]}"
                        )
                        continue
                    parent[child] = h.name
            else:
                if member.selector.labels is not None and not (
                    member.selector.labels or member.selector.expressions
                ):
                    warnings.append(f"HyperNode {h.name}: an empty labelMatch selects no node, as in Volcano")
                for node, labels in node_labels.items():
                    if not member.selector.matches(node, labels):
                        continue
                    current = leaf_of.get(node)
                    if current is None or by_name[current].tier > h.tier:
                        leaf_of[node] = h.name
                    elif current != h.name and by_name[current].tier == h.tier:
                        warnings.append(
                            f"node {node} is in {current} and {h.name} (both tier {h.tier}); kept {current}"
                        )
    tier_names = {h.tier_name: h.tier for h in nodes if h.tier_name}
    offset = 1 if any(h.tier == 0 for h in nodes) else 0
    switches = [FabricSwitch(id=h.name, tier=h.tier + offset, parent=parent.get(h.name, "")) for h in nodes]
    # Volcano lets a node hang under a HyperNode of any tier (e.g. NVLink domains of tier 0 for some
    # nodes, plain tier-1 leaves for others); the solver hangs nodes under tier-1 switches. A node
    # whose lowest HyperNode is higher gets a tier-1 switch of its own under it: alone there, as in
    # Volcano no lower-tier HyperNode holds it with any other node.
    own: set[str] = set()
    for node, leaf in sorted(leaf_of.items()):
        if by_name[leaf].tier + offset > 1:
            mine = f"{leaf}/{node}"
            switches.append(FabricSwitch(id=mine, tier=1, parent=leaf))
            leaf_of[node] = mine
            own.add(mine)
    return HyperNodeTree(
        switches=tuple(switches),
        leaf_of=leaf_of,
        tier_names=tier_names,
        warnings=tuple(warnings),
        tier_offset=offset,
        own_leaves=frozenset(own),
    )


class HyperNodeFiles:
    """HyperNodes from a file or directory, read again when a file changes (a ConfigMap update)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.error = ""  # why the last reload failed (the previous HyperNodes stay in use)
        self._stamp = self._current_stamp()
        self._cached = load(path)  # fail at start-up, not in the first session

    def _current_stamp(self) -> tuple[tuple[str, float], ...]:
        files = sorted(self.path.iterdir()) if self.path.is_dir() else [self.path]
        return tuple(
            (str(f), f.stat().st_mtime) for f in files if f.suffix in SUFFIXES or not self.path.is_dir()
        )

    def hypernodes(self) -> tuple[HyperNode, ...]:
        try:
            stamp = self._current_stamp()
            if stamp != self._stamp:
                self._stamp = stamp
                self._cached = load(self.path)
                self.error = ""
        except (OSError, InvalidRequest) as err:
            self.error = str(err)
        return self._cached
