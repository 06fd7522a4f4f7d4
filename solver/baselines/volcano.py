"""Volcano-like greedy placement: the ``network-topology-aware`` + ``binpack`` plugins, one job at a time.

Mimics what ../shared/reference/volcano.md describes (Volcano v1.14.3+):

- jobs by priority, then queue (request) order; a gang is all-or-nothing (each role's minimum);
- a job with a hard locality rule (``mode: hard``, ``highestTierAllowed``) goes to the lowest-tier
  hypernode (fabric switch subtree) whose free GPUs, judged at the start of the session, can hold it —
  fuller hypernodes first (binpack) — and is unplaced if none can; a soft rule is placed the same way
  but may fall back to the whole cluster;
- tasks one by one to the node with the best binpack score (CPU, memory and GPU equally weighted:
  ``(used + request) / allocatable``) plus the network-topology-aware score (a node in the same leaf as
  the job's tasks so far scores highest, ``(maxTier - LCA tier) / (maxTier - minTier)``); ties go to the
  smaller node name;
- inside the node, the first free GPUs and the first free NICs: Volcano knows nothing of PCIe or NIC
  pairing. A pick that breaks a REQUIRED rule is refused by the node (as a topology admission would).
"""

from __future__ import annotations

from collections.abc import Sequence

from solver.baselines.topology import Free, Greedy, LocalityIndex, Pick, first_free_pick
from solver.domain.model import MemberShape, SolveRequest, SolveResult

BINPACK_MAX = 100.0


def binpack(free: Free, shape: MemberShape, pick: Pick) -> float:
    """Volcano's binpack score: mean over CPU, memory and GPUs of (used + request) / allocatable."""
    node = free.node
    terms = []
    if node.cpu_milli and free.cpu is not None:
        terms.append((node.cpu_milli - free.cpu + shape.cpu_milli) / node.cpu_milli)
    if node.memory_mib and free.memory is not None:
        terms.append((node.memory_mib - free.memory + shape.memory_mib) / node.memory_mib)
    if node.gpus:
        terms.append((len(node.gpus) - len(free.gpus) + len(pick.gpus)) / len(node.gpus))
    return BINPACK_MAX * sum(terms) / len(terms) if terms else 0.0


def network_topology(node: str, used: Sequence[str], fabric: LocalityIndex) -> float:
    """How close ``node`` is to the job's tasks so far: 1 under the same leaf (or no task yet), falling
    linearly with the tier of their lowest common switch."""
    if not used:
        return BINPACK_MAX
    top = max((s.tier for s in fabric.switches.values()), default=1)
    tier = fabric.common_tier([node, *used])
    if tier is None:
        return 0.0
    if tier <= 1:
        return BINPACK_MAX
    return BINPACK_MAX * max(0.0, (top + 1 - tier) / top)


def node_score(
    free: Free, shape: MemberShape, pick: Pick, used: Sequence[str], fabric: LocalityIndex
) -> float:
    return binpack(free, shape, pick) + network_topology(free.node.name, used, fabric)


def free_fraction(nodes: Sequence[Free]) -> float:
    """Hypernodes are tried fullest first (binpack at hypernode level): their free GPU fraction."""
    total = sum(len(f.node.gpus) for f in nodes)
    return sum(len(f.gpus) for f in nodes) / total if total else 1.0


VOLCANO = Greedy(
    name="volcano",
    pick=first_free_pick,
    node_score=node_score,
    domain_key=free_fraction,
    domains_from_start=True,
)


def place(request: SolveRequest, deadline: float | None = None) -> SolveResult:
    """Volcano-like greedy placement of the request's jobs (see the module docstring); jobs not
    placed by ``deadline`` (``time.perf_counter()``) are left unplaced, TIME_LIMIT."""
    return VOLCANO.place(request, deadline)
