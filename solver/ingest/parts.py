"""Inventory parts: what one published source says about a cluster, in one shape for every reader.

A site's topology is spread over many places: each node's ``nvidia-smi`` output, the Kubernetes node
list and its labels (GPU Feature Discovery's ``nvidia.com/gpu.clique``, topograph's switch labels),
Kueue's or KAI's ``Topology`` objects, DRA ``ResourceSlice``\\ s, Slurm's topology files. Every reader
in :mod:`solver.ingest` turns its source into :class:`Parts` — per node a :class:`NodeFacts` (its
devices and PCIe tree, its NVLink domain, its path up the switch tree, its labels and size) plus the
switches it knows — and :mod:`solver.ingest.cluster` merges the parts of many sources with a stated
precedence into the ``Inventory`` the solver reads.

A fact a source does not know is ``None`` (or empty), never a default: "no NVLink domain" and "this
source does not say" must stay apart, or a lower-precedence source could never fill the gap.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from solver.domain.model import FabricSwitch, Node


@dataclass(frozen=True)
class NodeFacts:
    """What one source says about one node. ``where`` locates it for messages (``nodes.json:items[3]``)."""

    where: str
    devices: Node | None = None  # GPUs, NICs, PCIe switches, NVLinks, NUMA nodes (name unused)
    gpu_count: int | None = None  # a count without the devices (e.g. the node's nvidia.com/gpu capacity)
    gpu_model: str | None = None
    nvlink_domain: str | None = None
    nvlink_field: str = ""  # which field said so, for the report (``label nvidia.com/gpu.clique``)
    path: tuple[str, ...] | None = None  # switch ids from the node's leaf upward
    labels: Mapping[str, str] | None = None
    cpu_milli: int | None = None
    memory_mib: int | None = None
    schedulable: bool | None = None


@dataclass(frozen=True)
class Parts:
    """One source's contribution. ``kind`` names the reader (``kubernetes nodes``, ``kueue topology``)."""

    source: str
    kind: str
    nodes: Mapping[str, NodeFacts] = field(default_factory=dict)
    switches: Mapping[str, FabricSwitch] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    defines_nodes: bool = False  # a node list: the cluster is exactly its nodes

    def contributes(self) -> list[str]:
        """What this source says, counted, for the assembly report."""
        said: list[tuple[str, int]] = [
            ("nodes", len(self.nodes) if self.defines_nodes else 0),
            ("device sets", sum(f.devices is not None for f in self.nodes.values())),
            ("NVLink domains", len({f.nvlink_domain for f in self.nodes.values() if f.nvlink_domain})),
            ("switch paths", sum(f.path is not None for f in self.nodes.values())),
            ("switches", len(self.switches)),
        ]
        return [f"{count} {what}" for what, count in said if count]


def text_of(value: Any) -> str | None:
    """A label or attribute value as text; None for anything that is not a scalar."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    return None
