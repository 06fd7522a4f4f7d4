"""Cluster measures a what-if reports: GPUs used, stranded GPUs, fragmentation, occupancy per node,
misaligned GPU↔NIC pairs, locality tiers.

Computed here from the inventory and the placement, not taken from the placer, so the solver and the
baselines are measured by one ruler.

- Capacity is the healthy GPUs of schedulable nodes (a drained node or a failed GPU is not capacity);
  used is what allocations hold on them.
- A request *shape* is one member of the workload (GPUs, CPU, memory, NICs, GPU models), weighted by
  how many such members the workload has.
- A free GPU is **stranded** when no shape fits its node at all (too few GPUs left, or the node's
  CPU, memory or NICs are gone): capacity nobody in the queue can use.
- **Fragmentation** (FGD's measure, Weng et al. ATC'23, for whole GPUs) is the expected share of the
  free GPUs that a request drawn from the workload could not use: Σ_nodes Σ_shapes p(shape) × free
  GPUs of nodes the shape does not fit, over all free GPUs. 0 = every free GPU is usable by every
  request; 1 = none is.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from solver.domain.model import Inventory, Job, MemberPlacement, MemberShape, NicMode, Node
from solver.domain.topology import device_distance
from solver.reduce.normalise import alignment_distance, nic_demand
from solver.whatif.report import NodeUse, TierCount


@dataclass(frozen=True)
class Shape:
    gpus: int
    cpu_milli: int
    memory_mib: int
    nics: int
    models: frozenset[str]


@dataclass(frozen=True)
class FreeNode:
    """What one schedulable node still has free."""

    gpus: int
    models: Counter[str]  # free GPUs by model
    cpu_milli: int | None  # None: not tracked
    memory_mib: int | None
    nics: int

    def fits(self, shape: Shape) -> bool:
        usable = sum(c for m, c in self.models.items() if m in shape.models) if shape.models else self.gpus
        return (
            usable >= shape.gpus
            and (self.cpu_milli is None or self.cpu_milli >= shape.cpu_milli)
            and (self.memory_mib is None or self.memory_mib >= shape.memory_mib)
            and self.nics >= shape.nics
        )


def held_gpus(node: Node) -> set[str]:
    return {g for a in node.allocations for g in (*a.gpus, *(s.gpu for s in a.gpu_shares))}


def free_node(node: Node) -> FreeNode:
    held = held_gpus(node)
    free = [g for g in node.gpus if g.healthy and g.id not in held]
    held_nics = {n for a in node.allocations for n in a.nics}
    return FreeNode(
        gpus=len(free),
        models=Counter(g.model for g in free),
        cpu_milli=node.cpu_milli - sum(a.cpu_milli for a in node.allocations) if node.cpu_milli else None,
        memory_mib=node.memory_mib - sum(a.memory_mib for a in node.allocations) if node.memory_mib else None,
        nics=sum(1 for n in node.nics if n.healthy and n.rdma and n.name not in held_nics),
    )


def shape_of(member: MemberShape) -> Shape:
    return Shape(
        gpus=member.gpus or (1 if member.gpu_share is not None else 0),
        cpu_milli=member.cpu_milli,
        memory_mib=member.memory_mib,
        nics=nic_demand(member),
        models=frozenset(member.gpu_models),
    )


def workload(jobs: Iterable[Job]) -> dict[Shape, float]:
    """GPU-asking member shapes of the workload and their popularity (summing to 1)."""
    counts: Counter[Shape] = Counter()
    for job in jobs:
        for role in job.roles:
            shape = shape_of(role.member)
            if shape.gpus:
                counts[shape] += role.replicas
    total = sum(counts.values())
    return {s: c / total for s, c in sorted(counts.items(), key=lambda kv: repr(kv[0]))} if total else {}


@dataclass(frozen=True)
class Usage:
    gpus_total: int
    gpus_used: int
    stranded: float
    fragmentation: float


def usage(inventory: Inventory, shapes: dict[Shape, float]) -> Usage:
    """Capacity, use, stranded GPUs and fragmentation of an inventory against a workload."""
    total = used = stranded = 0
    unusable = 0.0
    free_total = 0
    for node in inventory.nodes:
        if not node.schedulable:
            continue
        healthy = [g for g in node.gpus if g.healthy]
        held = held_gpus(node)
        total += len(healthy)
        used += sum(1 for g in healthy if g.id in held)
        free = free_node(node)
        if not free.gpus:
            continue
        free_total += free.gpus
        fits = [free.fits(s) for s in shapes]
        if shapes and not any(fits):
            stranded += free.gpus
        unusable += sum(p * free.gpus for (s, p), ok in zip(shapes.items(), fits, strict=True) if not ok)
    return Usage(
        gpus_total=total,
        gpus_used=used,
        stranded=float(stranded),
        fragmentation=round(unusable / free_total, 6) if free_total else 0.0,
    )


def node_use(inventory: Inventory) -> tuple[NodeUse, ...]:
    """GPU occupancy per node, in inventory order (the heatmap groups by leaf)."""
    out = []
    for node in inventory.nodes:
        held = held_gpus(node)
        out.append(
            NodeUse(
                node=node.name,
                leaf=node.leaf,
                gpus=len(node.gpus),
                used=sum(1 for g in node.gpus if g.id in held),
                unhealthy=sum(1 for g in node.gpus if not g.healthy),
                schedulable=node.schedulable,
            )
        )
    return tuple(out)


def misaligned_pairs(node: Node, member: MemberShape, placed: MemberPlacement) -> int:
    """GPUs of a placed member that cannot each have one of its NICs within the asked distance
    (a maximum matching; 0 for members without NICs). PER_MEMBER NICs: GPUs with none near."""
    if nic_demand(member) == 0 or not placed.gpus or not placed.nics:
        return 0
    limit = alignment_distance(member)
    near = {g: {n for n in placed.nics if device_distance(node, g, n) <= limit} for g in placed.gpus}
    if member.nics.mode != NicMode.PER_GPU:
        return sum(1 for g in placed.gpus if not near[g])
    return len(placed.gpus) - _matching(near)


def _matching(near: dict[str, set[str]]) -> int:
    owner: dict[str, str] = {}

    def claim(g: str, seen: set[str]) -> bool:
        for n in sorted(near[g]):
            if n in seen:
                continue
            seen.add(n)
            if n not in owner or claim(owner[n], seen):
                owner[n] = g
                return True
        return False

    return sum(claim(g, set()) for g in sorted(near))


def tier_counts(tiers: Sequence[int]) -> tuple[TierCount, ...]:
    return tuple(TierCount(tier=t, jobs=c) for t, c in sorted(Counter(tiers).items()))
