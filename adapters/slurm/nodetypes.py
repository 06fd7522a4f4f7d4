"""Per-node PCIe topology from ``nvidia-smi topo -m`` captures, and the *switch groups* that make a
device plan enforceable by Slurm.

Topology files live in one directory and are found per node, most specific first:
``DIR/<node>.txt``, then ``DIR/<hostlist>.txt`` whose expansion holds the node (``gpu[001-032].txt``
for one node type), then ``DIR/default.txt``. A ``# topoplace: gpu_model=H100 gpu_memory_mib=81920``
comment line in the capture fills what the matrix does not print.

A switch group is the set of GPUs and NICs under one top-level PCIe switch (the switch just below a
CPU root complex; a leaf hanging straight off the root complex is its own group). Every GPU and NIC
of a group are PXB or closer to each other, so "k GPUs and k NICs of group sw2" is an aligned choice
whatever devices Slurm picks inside the group — which is why gres.conf types each device by its
group (``Type=sw2``) and a plan becomes ``--gres=gpu:sw2:k,nic:sw2:k``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from adapters.slurm.hostlist import HostlistError, expand
from solver.domain.errors import InvalidRequest, Problem
from solver.domain.model import Node, SwitchKind
from solver.ingest.nvidia_smi import parse_topology

_META = re.compile(r"^#\s*topoplace:\s*(.*)$", re.MULTILINE)
GROUP_PREFIX = "sw"


@dataclass(frozen=True)
class SwitchGroup:
    type: str  # the GRES type, e.g. "sw2"
    gpus: tuple[str, ...]  # GPU ids (GPU0 …) in index order
    nics: tuple[str, ...]  # NIC names in the capture's column order
    numa: int | None


@dataclass(frozen=True)
class NodeType:
    """One capture: the parsed node (named after the file) and its switch groups."""

    source: str
    node: Node
    groups: tuple[SwitchGroup, ...]

    def group_of(self) -> dict[str, str]:
        """Device (GPU id or NIC name) → its group's GRES type."""
        return {d: g.type for g in self.groups for d in (*g.gpus, *g.nics)}

    def gpu_order(self) -> tuple[str, ...]:
        """GPU ids in gres.conf order (by group, then index): the order Slurm's IDX counts in."""
        return tuple(g for group in self.groups for g in group.gpus)

    def nic_order(self) -> tuple[str, ...]:
        return tuple(n for group in self.groups for n in group.nics)


def _metadata(text: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for match in _META.finditer(text):
        for token in match.group(1).split():
            key, _, value = token.partition("=")
            values[key] = value
    return values


def switch_groups(node: Node) -> tuple[SwitchGroup, ...]:
    """Groups in order of their lowest GPU index (NIC-only groups last, by first NIC)."""
    parent = {s.id: s.parent for s in node.pcie_switches}
    kind = {s.id: s.kind for s in node.pcie_switches}

    def top(switch: str) -> str:
        current = switch
        seen = {current}
        while parent.get(current) and kind.get(parent[current]) != SwitchKind.HOST_BRIDGE:
            current = parent[current]
            if current in seen:
                break
            seen.add(current)
        return current

    members: dict[str, tuple[list[str], list[str], int | None]] = {}
    for gpu in node.gpus:
        members.setdefault(top(gpu.pcie_switch), ([], [], gpu.numa))[0].append(gpu.id)
    for nic in node.nics:
        members.setdefault(top(nic.pcie_switch), ([], [], nic.numa))[1].append(nic.name)
    index = {g.id: g.index for g in node.gpus}
    nic_pos = {n.name: i for i, n in enumerate(node.nics)}
    ordered = sorted(
        members.values(),
        key=lambda m: (0, min(index[g] for g in m[0])) if m[0] else (1, min(nic_pos[n] for n in m[1])),
    )
    return tuple(
        SwitchGroup(
            type=f"{GROUP_PREFIX}{k}",
            gpus=tuple(sorted(gpus, key=index.__getitem__)),
            nics=tuple(sorted(nics, key=nic_pos.__getitem__)),
            numa=numa,
        )
        for k, (gpus, nics, numa) in enumerate(ordered)
    )


@lru_cache(maxsize=64)
def _load(path: Path, mtime_ns: int) -> NodeType:
    del mtime_ns  # part of the cache key only: a changed file is read again
    try:
        text = path.read_text()
    except OSError as err:
        raise InvalidRequest([Problem(path=str(path), message=f"cannot read: {err.strerror}")]) from err
    meta = _metadata(text)
    try:
        memory = int(meta.get("gpu_memory_mib", "0"))
    except ValueError:
        memory = 0
    node = parse_topology(
        text, node=path.stem, gpu_model=meta.get("gpu_model", ""), source=str(path), gpu_memory_mib=memory
    )
    return NodeType(source=str(path), node=node, groups=switch_groups(node))


def load_node_type(path: Path) -> NodeType:
    """A capture parsed once per change (the placement daemon asks for it on every submit)."""
    return _load(path, path.stat().st_mtime_ns)


class TopoDir:
    """The directory of captures and the rule that finds a node's file."""

    def __init__(self, directory: Path) -> None:
        if not directory.is_dir():
            raise InvalidRequest(
                [Problem(path=str(directory), message="not a directory of nvidia-smi captures")]
            )
        self.directory = directory
        self._patterns: list[tuple[Path, set[str]]] = []
        problems = []
        for path in sorted(directory.glob("*.txt")):
            if "[" in path.stem:
                try:
                    self._patterns.append((path, set(expand(path.stem))))
                except HostlistError as err:
                    problems.append(Problem(path=str(path), message=f"file name is not a hostlist: {err}"))
        if problems:
            raise InvalidRequest(problems)

    def path_for(self, node: str) -> Path | None:
        exact = self.directory / f"{node}.txt"
        if exact.is_file():
            return exact
        for path, names in self._patterns:
            if node in names:
                return path
        default = self.directory / "default.txt"
        return default if default.is_file() else None

    def node_type(self, node: str) -> NodeType | None:
        path = self.path_for(node)
        return load_node_type(path) if path else None
