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

from adapters.slurm.captures import capture_for, hostlist_captures
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
        """GPU ids by nvidia-smi index: the order Slurm 22.05 counts IDX in. slurmd numbers a GRES's
        devices by their file (``/dev/nvidia<k>`` is IDX k), whatever the order of gres.conf's lines,
        while slurmctld gives IDX the types of the lines in line order — so lines must be written in
        file order, or a typed request gets another group's device (seen on the emulated cluster)."""
        index = {g.id: g.index for g in self.node.gpus}
        return tuple(sorted((g for group in self.groups for g in group.gpus), key=index.__getitem__))

    def nic_order(self) -> tuple[str, ...]:
        """NIC names by group, then column: gres/nic keeps gres.conf's line order, and slurmctld gives
        each type a run of IDX, so a type's lines must be together."""
        return tuple(n for group in self.groups for n in group.nics)

    def typed_layout_problem(self) -> str | None:
        """Why Slurm 22.05 cannot type this node's GPUs by switch group, or None. slurmd numbers GPUs
        by device file and slurmctld gives each type a run of IDX in type order, so each group's GPUs
        must be consecutive numbers, the groups in order (seen on the emulated cluster: with GPU0
        and GPU4 on sw0, ``gpu:sw0:2`` got GPU0 and GPU1)."""
        order = [g for group in self.groups for g in group.gpus]
        if list(self.gpu_order()) != order:
            groups = ", ".join(f"{g.type}={list(g.gpus)}" for g in self.groups if g.gpus)
            return (
                f"{self.source}: switch groups {groups} "
                "are not runs of consecutive GPU numbers; Slurm 22.05 would hand a typed request GPUs "
                "of another group. Renumber the device files, or keep untyped GRES on these nodes"
            )
        return None


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
        self._patterns, bad = hostlist_captures(directory)
        if bad:
            raise InvalidRequest([Problem(path=str(path), message=reason) for path, reason in bad])
        # Which file a node's is does not change while the directory's listing does not (callers that
        # keep a TopoDir make a new one when the directory's mtime changes): asked once per node.
        self._paths: dict[str, Path | None] = {}

    def path_for(self, node: str) -> Path | None:
        if node not in self._paths:
            self._paths[node] = capture_for(self.directory, node, self._patterns)
        return self._paths[node]

    def node_type(self, node: str) -> NodeType | None:
        path = self.path_for(node)
        return load_node_type(path) if path else None
